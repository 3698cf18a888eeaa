"""The rollout correction as a whole: what a run asks for (`CorrectionSpec`, from
algorithm.rollout_correction or the shorthand rollout.tis_cap / rollout.is_mode) and the correction of
a batch (`correct`): importance weights (verl.algorithms.rollout_is) and rejection (verl.algorithms.rollout_rs).

Two modes, as real verl 0.9.1's:

  decoupled (bypass_mode false): three policies. pi_old is recomputed by the actor; log r = log pi_old -
      log pi_engine, once per batch before the advantages. Rejected tokens leave batch.response_mask
      (the advantages, the critic and every loss term then skip them, and a token-mean divides by the
      tokens that remain); the weights multiply each token's policy-gradient term.
  bypass (bypass_mode true): two policies. The engine's log-probs serve as pi_old (no recompute);
      each micro-batch's log r = log pi_theta (detached) - log pi_engine. Rejected tokens leave the
      policy-gradient term's numerator; its denominator stays the mini-batch's tokens (real verl's
      engine counts them before its bypass loss runs). loss_type ppo_clip: the PPO ratio pi_theta /
      pi_engine is the correction (weights are only logged); reinforce: L_t = -w_t A_t log pi_theta.

Shorthand: rollout.tis_cap: c with rollout.is_mode: truncate is rollout_is: token, rollout_is_threshold: c;
with is_mode: mask it is rollout_rs: token_k1, rollout_rs_threshold: c (tokens outside [1/c, c] rejected).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from verl.algorithms.masked import masked_mean, masked_sum
from verl.algorithms.rollout_is import SAFETY_BOUND, is_weights, parse_is_threshold
from verl.algorithms.rollout_rs import RejectionRule, parse_rejection, rejection_mask

Tensor = torch.Tensor

IS_MODES = ("truncate", "mask")  # rollout.is_mode, the shorthand's two forms
LOSS_TYPES = {"ppo_clip": "ppo", "reinforce": "reinforce"}  # bypass loss_type -> the policy loss it runs
PREFIX = "rollout_corr/"


@dataclass(frozen=True)
class CorrectionSpec:
    is_level: Optional[str] = None  # token | sequence | None (no weights)
    is_upper: float = 2.0
    is_lower: Optional[float] = None  # IcePop's lower bound; None: truncation at is_upper
    batch_normalize: bool = False
    rules: tuple[RejectionRule, ...] = ()  # rejection sampling; () = none
    bypass: bool = False
    loss_type: str = "ppo_clip"

    @property
    def enabled(self) -> bool:
        return bool(self.is_level or self.rules or self.bypass)

    @property
    def needs_batch_pass(self) -> bool:
        """Decoupled corrections that need the whole batch with pi_old before the update (the mask the
        loss's counts come from, the batch mean): pi_old cannot come from the update's first forward."""
        return not self.bypass and bool(self.rules or (self.is_level and self.batch_normalize))

    @property
    def applies_weights(self) -> bool:
        """Whether the weights multiply the loss (bypass ppo_clip only logs them)."""
        return bool(self.is_level) and not (self.bypass and self.loss_type == "ppo_clip")


def correction_spec(rollout_cfg, rc_cfg) -> CorrectionSpec:
    """The spec of a run: algorithm.rollout_correction (`rc_cfg`), or the shorthand of `rollout_cfg`
    (rollout.tis_cap > 0; the config refuses both at once). Thresholds are checked by the section."""
    if rollout_cfg is not None and rollout_cfg.tis_cap > 0:
        cap = float(rollout_cfg.tis_cap)
        if rollout_cfg.is_mode == "mask":
            return CorrectionSpec(rules=parse_rejection("token_k1", str(cap)))
        return CorrectionSpec(is_level="token", is_upper=cap)
    if rc_cfg is None:
        return CorrectionSpec()
    upper, lower = parse_is_threshold(rc_cfg.rollout_is_threshold) if rc_cfg.rollout_is else (2.0, None)
    rules = parse_rejection(rc_cfg.rollout_rs, rc_cfg.rollout_rs_threshold) if rc_cfg.rollout_rs else ()
    return CorrectionSpec(is_level=rc_cfg.rollout_is, is_upper=upper, is_lower=lower,
                          batch_normalize=bool(rc_cfg.rollout_is_batch_normalize), rules=rules,
                          bypass=bool(rc_cfg.bypass_mode), loss_type=rc_cfg.loss_type)


@torch.no_grad()
def correct(log_probs: Tensor, engine_log_probs: Tensor, mask: Tensor,
            spec: CorrectionSpec) -> tuple[Optional[Tensor], Tensor, dict]:
    """(weights (B, R) or None, the mask with rejected tokens at 0 (B, R), metrics "rollout_corr/...").
    log_probs: pi_old's (decoupled) or pi_theta's (bypass) log-probs of the sampled tokens (B, R);
    engine_log_probs: the engine's (B, R); mask (B, R) float."""
    log_ratio = log_probs.float() - engine_log_probs.float()
    mask = mask.to(log_ratio.dtype)
    stats: dict = {}
    weights = None
    if spec.is_level:
        weights, s = is_weights(log_ratio, mask, spec.is_level, spec.is_upper, spec.is_lower, spec.batch_normalize)
        stats.update(s)
    new_mask = mask
    if spec.rules:
        new_mask, s = rejection_mask(log_ratio, mask, spec.rules)
        stats.update(s)
    stats.update(offpolicy_metrics(log_ratio, mask))
    return weights, new_mask, {PREFIX + k: v for k, v in stats.items()}


def offpolicy_metrics(log_ratio: Tensor, mask: Tensor) -> dict:
    """How far apart the two policies are, over the valid tokens (before any rejection), r_t = exp(log_ratio):
    kl = mean(-log r) (KL(engine || pi_old)), k3_kl = mean(r - 1 - log r), chi2_token = mean(r^2) - 1,
    chi2_seq = mean over responses of (prod_t r_t)^2 - 1."""
    if not (mask > 0).any():
        return {}
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    seq = masked_sum(log_ratio, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B,)
    return {"kl": float(masked_mean(-log_ratio, mask)),
            "k3_kl": float(masked_mean(torch.exp(lr) - 1.0 - lr, mask)),
            "chi2_token": float(masked_mean(torch.exp(2.0 * lr), mask) - 1.0),
            "chi2_seq": float(torch.exp(2.0 * seq).mean() - 1.0)}


@torch.no_grad()
def engine_kl(actor_log_probs: torch.Tensor, engine_log_probs: torch.Tensor, mask: torch.Tensor) -> float:
    """KL(pi_engine || pi_actor) on the engine's sampled tokens, by the k3 estimator (Schulman 2020):

        log r_t = log pi_actor(y_t) - log pi_engine(y_t),    kl = mean_t (r_t - 1 - log r_t)   (masked mean)

    Each term is >= 0 and the mean is unbiased for the KL since y_t ~ pi_engine (E[r_t] = 1). Real verl logs
    the same figure as rollout_corr/k3_kl. 0.0 where the mask counts no token."""
    log_r = (actor_log_probs.float() - engine_log_probs.float()).clamp(-20.0, 20.0)
    if not (mask > 0).any():
        return 0.0
    return float(masked_mean(torch.exp(log_r) - 1.0 - log_r, mask))


def ratio_quantile(actor_log_probs: torch.Tensor, engine_log_probs: torch.Tensor, mask: torch.Tensor,
                   q: float = 0.999) -> float:
    """The q-quantile of the per-token importance ratio r_t = pi_actor(y_t) / pi_engine(y_t) over the masked
    tokens (linear interpolation between order statistics, torch.quantile's default): its tail is what an MoE
    model's routing mismatch blows up (rollout/is_ratio_p999). log r_t is clamped to [-20, 20]; 1.0 where the
    mask counts no token."""
    picked = (actor_log_probs.float() - engine_log_probs.float())[mask > 0]
    if picked.numel() == 0:
        return 1.0
    return float(torch.quantile(torch.exp(picked.clamp(-20.0, 20.0)), q))
