"""KL divergence to the reference policy: per-token estimators, the in-reward penalty,
and the coefficient controllers.

Per-token estimators of KL(pi || pi_ref) from a sample y_t ~ pi (Schulman 2020,
"Approximating KL Divergence", http://joschu.net/blog/kl-approx.html), with
log r = log pi_ref(y_t) - log pi(y_t):

  k1  = -log r = logp - ref                 unbiased, high variance, can be negative
  k2  = 0.5 (log r)^2                       biased, low variance, >= 0
  k3  = r - 1 - log r                       unbiased, low variance, >= 0 ("low_var_kl"; GRPO)
  abs = |logp - ref|

Two placements (see docs/algorithms.md):
  * in the reward (PPO / InstructGPT, RLOO, REINFORCE++): r_t <- r_t - beta * kl_t before
    advantages are computed; beta may be adapted by `AdaptiveKLController`;
  * as a loss term (GRPO): loss += kl_loss_coef * aggregate(kl_t) on the current policy's
    log-probs, so it is differentiated; call `kl_penalty(log_probs, ref_log_probs, ...)`.
"""

from __future__ import annotations

import torch

from verl.algorithms.masked import masked_mean

Tensor = torch.Tensor

KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token KL estimate (B, R) between the sampling policy and the reference.

    k3 is computed as exp(d) - d - 1 with d = ref - logp clamped to [-20, 20] before the
    exponential (so neither the value nor its gradient overflows), and the result clamped
    to [-10, 10] for stability, as in GRPO implementations.
    Gradients flow through `log_probs` (use it for the KL loss); `ref_log_probs` is a constant.
    """
    estimator = _ALIASES.get(estimator, estimator)
    diff = log_probs - ref_log_probs  # (B, R) log pi - log pi_ref
    if estimator == "k1":
        return diff
    if estimator == "k2":
        return 0.5 * diff.square()
    if estimator == "abs":
        return diff.abs()
    if estimator == "k3":
        d = (-diff).clamp(-20.0, 20.0)  # log r = ref - logp
        return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"kl estimator '{estimator}' is not one of {', '.join(KL_ESTIMATORS)}")


@torch.no_grad()
def apply_kl_in_reward(
    token_level_scores: Tensor,
    old_log_probs: Tensor,
    ref_log_probs: Tensor,
    mask: Tensor,
    kl_coef: float,
    estimator: str = "k1",
) -> tuple[Tensor, float]:
    """Token-level rewards with the KL penalty folded in (Ziegler et al. 2019; Ouyang et al. 2022):

        rewards[i, t] = scores[i, t] - beta * kl[i, t] * m[i, t]

    where kl uses the rollout (old) policy's log-probs. Returns (rewards (B, R), mean_kl) with

        mean_kl = (1/B) sum_i ( sum_t m_it kl_it / sum_t m_it )      (0 for a row with no token)

    the mean over sequences of each one's mean KL: the number an `AdaptiveKLController` steers
    towards `target_kl`, as real verl's apply_kl_penalty and TRL's PPO measure it.
    """
    mask = mask.to(token_level_scores.dtype)
    kl = kl_penalty(old_log_probs, ref_log_probs, estimator)  # (B, R)
    kl = torch.where(mask != 0, kl, torch.zeros_like(kl))
    rewards = token_level_scores - kl_coef * kl * mask
    return rewards, float(masked_mean(kl, mask, dim=-1).mean().item())


class FixedKLController:
    """Constant KL coefficient beta."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Adaptive beta (Ziegler et al. 2019, "Fine-Tuning Language Models from Human
    Preferences", section 2.2): a proportional controller steering the KL to a target,

        e      = clip(KL_current / KL_target - 1, -0.2, 0.2)
        beta  <- beta * (1 + e * n_steps / horizon)

    n_steps is the number of samples (or steps) since the last update; horizon sets how fast
    beta moves.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0, got {target_kl}, {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.target = float(state.get("target", self.target))
        self.horizon = float(state.get("horizon", self.horizon))


def build_kl_controller(algorithm_cfg) -> FixedKLController | AdaptiveKLController:
    """The in-reward KL controller for an `AlgorithmConfig` (after presets are applied):
    `kl_ctrl.type` fixed -> FixedKLController(kl_coef); adaptive ->
    AdaptiveKLController(kl_coef, kl_ctrl.target_kl, kl_ctrl.horizon)."""
    kl_coef = algorithm_cfg.kl_coef or 0.0
    ctrl = algorithm_cfg.kl_ctrl
    if ctrl.type == "fixed":
        return FixedKLController(kl_coef)
    if ctrl.type == "adaptive":
        return AdaptiveKLController(kl_coef, ctrl.target_kl, ctrl.horizon)
    raise ValueError(f"algorithm.kl_ctrl.type '{ctrl.type}' is not one of fixed, adaptive")
