"""Runtime invariants: checks of each step's metrics that stop a run which trains, but trains wrong.

    checker = InvariantChecker(config, say=print)
    checker.after_step(step, metrics)      # raises InvariantBroken (one line, exit 1); may print a warning

1. On-policy start of every update. Before the first optimizer step of an update the policy is pi_old,
   so on the first mini-batch of the first epoch log pi - log pi_old = 0 on every token, up to the
   rounding of two forwards of the same weights (the update's and pi_old's, with other micro-batches).
   `actor/first_minibatch_log_ratio_abs` (mean |log pi - log pi_old|, verl/workers/update_loop.py) above
   `training.on_policy_tol` (0.05 nats) means the two forwards compute different functions: dropout left
   on in training mode, another attention kernel or packing in one of them, a model whose forward is not
   deterministic. PPO's ratio then measures that difference, not the policy's change.

2. Engine vs actor. `rollout/logprob_diff` (mean |engine log-prob - actor log-prob| on the sampled
   tokens, on the steps the engine returns log-probs) is ~1e-6 in float32 and ~0.03 in bfloat16 on a
   GPU. Above `training.logprob_diff_warn` (0.1; 0.25 under rollout.quantization fp8, whose FP8 engine differs
   from the actor by design: 0.013-0.017 measured on the CPU's kernels) a warning names the likely causes; above
   `training.logprob_diff_stop` (1.0), or above the warning level on 3 checks in a row, the run stops.
   Not checked where the engine samples with older weights by design (async_training with
   max_staleness > 0, partial rollouts): the difference is then the policy's change.

In bypass mode (algorithm.rollout_correction.bypass_mode) pi_old is the engine's, so the first mini-batch's
log-ratio is the engine-vs-actor difference: it is checked as check 2 is, and check 1 does not apply.

`training.check_invariants: false` turns both off. A stop is `InvariantBroken` (exit 1): nothing of the
step is saved beyond what was saved before; the checkpoint of the last good step is the one to resume from.
"""

from __future__ import annotations

from typing import Callable

FIRST_RATIO_KEY = "actor/first_minibatch_log_ratio_abs"
DIFF_KEY = "rollout/logprob_diff"
DIFF_STREAK = 3  # checks in a row above logprob_diff_warn before the run stops
CAUSES = ("the engine and the actor compute in different precision (model.dtype, the engine's dtype or "
          "quantization), the weights did not reach the engine (weight sync; a LoRA not merged into it), or they "
          "read different tokens (a chat template or tokenizer that differs between them)")


class InvariantBroken(RuntimeError):
    """A runtime invariant failed; the message names it, the measured value and the likely causes."""


class InvariantChecker:
    def __init__(self, config, say: Callable[[str], None] = print):
        t = config.training
        self.enabled = bool(t.check_invariants)
        self.on_policy_tol = float(t.on_policy_tol)
        self.diff_warn, self.diff_stop = float(t.logprob_diff_warn), float(t.logprob_diff_stop)
        a = config.async_training
        self.stale_by_design = bool(a.enable and (a.max_staleness > 0 or a.partial_rollout))
        self.bypass = bool(config.algorithm.rollout_correction.bypass_mode)
        self.say = say
        self.diff_streak = 0

    def after_step(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        if self.bypass:  # pi_old = the engine: the first mini-batch's log-ratio is the engine-vs-actor gap
            if not self.stale_by_design:
                self._engine_diff(step, metrics.get(FIRST_RATIO_KEY))
            return
        self._on_policy(step, metrics.get(FIRST_RATIO_KEY))
        if not self.stale_by_design:
            self._engine_diff(step, metrics.get(DIFF_KEY))

    def _on_policy(self, step: int, value) -> None:
        if value is None or value <= self.on_policy_tol:
            return
        raise InvariantBroken(
            f"step {step}: the update's first mini-batch is not on-policy: mean |log pi - log pi_old| = {value:.4g} "
            f"(training.on_policy_tol {self.on_policy_tol:g}); pi_old's forward and the update's compute different "
            "functions of the same weights: dropout left on in training mode (the model config's *dropout / *pdrop), "
            "another attention implementation or packing in one of them, or a forward that is not deterministic. "
            "training.check_invariants=false runs anyway")

    def _engine_diff(self, step: int, value) -> None:
        if value is None:  # a step without engine log-probs (rollout.logprob_check_every)
            return
        if value <= self.diff_warn:
            self.diff_streak = 0
            return
        self.diff_streak += 1
        if value > self.diff_stop or self.diff_streak >= DIFF_STREAK:
            why = (f"above training.logprob_diff_stop {self.diff_stop:g}" if value > self.diff_stop else
                   f"above training.logprob_diff_warn {self.diff_warn:g} on {self.diff_streak} checks in a row")
            raise InvariantBroken(f"step {step}: the engine's log-probs differ from the actor's by {value:.4g} a token "
                                  f"({why}); likely causes: {CAUSES}. training.check_invariants=false runs anyway")
        self.say(f"warning: step {step}: rollout/logprob_diff {value:.4g} is above training.logprob_diff_warn "
                 f"{self.diff_warn:g} (the run stops after {DIFF_STREAK} such checks in a row); likely causes: {CAUSES}")
