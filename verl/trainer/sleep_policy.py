"""Whether the rollout engine sleeps for the update: `rollout.sleep_when` (with
`rollout.enable_sleep_mode`, on a GPU engine that can sleep).

  always   every step: the hybrid engine releases its KV cache (and, at level 2, its weights)
           while the models train, and maps them back for the next generation. On the H200 this
           cost 0.36 s of a 1.57 s GRPO step of a 135M model (sleep 0.14 s, wake with the weight
           re-load 0.22 s; benchmarks/results/h200/e2e_grpo_a_smollm2_vllm_2026-12-01_after18.md).
  needed   (default) decided once, at the first step, before any worker derives its token budget
           (verl.workers.memory_budget): the engine stays awake when, for every model worker with a
           derived budget, the update's largest mini-batch fits in one micro-batch of the budget the
           memory left beside the awake engine gives. Sleeping could then not make any micro-batch
           larger; it would only cost the sleep and the wake. Otherwise the engine sleeps every step.
           A worker without a derived budget (CPU, training.max_tokens_per_micro_batch set,
           data-parallel ranks, Ray workers) gives no estimate: the engine sleeps, the safe choice.

The decision is kept for the run (logged once): later batches with longer responses are cut by
the budget derived beside the awake engine into more micro-batches, never an out-of-memory error
(and an out-of-memory error in the update is retried with half the budget anyway).
"""

from __future__ import annotations

from typing import Optional

from verl.batch import Batch
from verl.workers.micro_batches import _real_lengths, seq_token_counts


def mini_batch_tokens(batch: Batch, mini_rows: int, packed: bool) -> int:
    """An upper bound on the tokens of one mini-batch of `mini_rows` rows of `batch`, counted as
    micro-batching counts them: packed, the sum of its real lengths (the longest rows'); padded,
    rows x (longest real prompt + longest real response)."""
    rows = min(len(batch), max(1, mini_rows))
    if packed:
        return int(sum(sorted(seq_token_counts(batch), reverse=True)[:rows]))
    prompt_len, resp_len = _real_lengths(batch)
    return rows * (max(prompt_len, default=0) + max(resp_len, default=0))


def sleep_needed(need_tokens: int, awake_budgets: list[Optional[int]]) -> bool:
    """True unless every worker's budget beside the awake engine holds `need_tokens` (a worker
    with no estimate, None, counts as not holding it)."""
    return not awake_budgets or any(b is None or need_tokens > b for b in awake_budgets)


class SleepPolicy:
    def __init__(self, when: str, workers: list, mini_rows: Optional[int], packed: bool, can_sleep: bool = True):
        """workers: the trainer's model roles (verl.roles.ModelRole: actor, and reference / critic where present);
        mini_rows: training.mini_batch_size (None: the whole batch); can_sleep: the engine has a
        sleep mode (without one, sleep() is a no-op and there is nothing to decide or log)."""
        self.when, self.workers, self.mini_rows, self.packed = when, workers, mini_rows, packed
        self.decided: Optional[bool] = None if when == "needed" and can_sleep else True

    @classmethod
    def for_run(cls, config, workers: list, engine) -> "SleepPolicy":
        """The policy of a run: rollout.sleep_when over the model roles (the actor first), counted as the
        actor's micro-batching counts tokens (packed or padded), for `engine`."""
        return cls(config.rollout.sleep_when, workers, config.training.mini_batch_size,
                   packed=workers[0].packs_sequences(), can_sleep=engine.can_sleep())

    def wanted(self, batch: Batch) -> bool:
        if self.decided is None:
            need = mini_batch_tokens(batch, self.mini_rows or len(batch), self.packed)
            budgets = [w.awake_token_budget() for w in self.workers]
            self.decided = sleep_needed(need, budgets)
            if all(b is None for b in budgets):
                return True  # nothing to decide on (CPU, set micro-batching, Ray): sleep as always, no log line
            shown = ", ".join("no estimate" if b is None else str(b) for b in budgets)
            verdict = ("sleeps for every update" if self.decided else "stays awake for the updates")
            print(f"verl: the rollout engine {verdict} (rollout.sleep_when: needed; a mini-batch of up to {need} "
                  f"tokens; the workers' token budgets beside the awake engine: {shown}; "
                  "rollout.sleep_when: always sleeps every step)", flush=True)
        return self.decided
