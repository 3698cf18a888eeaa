"""What every policy loss shares: its inputs, its registration, the PPO clipped surrogate.

A policy loss is a pure function `fn(x: PolicyLossInputs) -> (loss_mat (B, R), metrics)`:
the per-token loss to MINIMISE (0 where the mask is 0 or not, `aggregate_loss` ignores masked
tokens) and detached 0-d metric tensors. `compute_policy_loss` (policy_losses.py) adds the
shared parts around it: ppo_kl, the importance weights of the rollout correction and the
aggregation. Registering one is a decorated function:

    @policy_loss("my_loss")
    def _my_loss(x: PolicyLossInputs):
        return -x.advantages * x.log_probs, {}

`algorithm.policy_loss: my_loss` is then accepted (the config takes its choices from
POLICY_LOSSES). A loss whose formula fixes the aggregation of its own term (GMPO's geometric mean is
one number per sequence; SAPO averages per sequence) says so with `agg_mode=`; `algorithm.loss_agg_mode`
then aggregates the KL and entropy terms only (as real verl's sapo and geo_mean do: their
aggregation is their own, the KL loss and the entropy bonus follow actor.loss_agg_mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from verl.algorithms.masked import masked_mean

Tensor = torch.Tensor

MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: keeps ratios and their gradients finite on garbage tokens


@dataclass
class PolicyLossInputs:
    """log_probs (B, R) carry gradient (the current policy); old_log_probs, advantages (B, R) are
    constants; mask (B, R) float. clip_low / clip_high: the ratio bounds 1 - low, 1 + high;
    clip_c: the dual-clip bound (0 = off). params: the losses' own knobs as attributes
    (AlgorithmConfig.loss_params: tau_pos, tau_neg, clip_cov_ratio, ...)."""

    log_probs: Tensor
    old_log_probs: Tensor
    advantages: Tensor
    mask: Tensor
    clip_low: float
    clip_high: float
    clip_c: float = 0.0
    params: Any = None
    is_weights: Optional[Tensor] = None  # (B, R), only for a loss with own_is_weights (else applied per token)

    @property
    def log_ratio(self) -> Tensor:
        """log rho_t = logp_t - old_t (B, R), with gradient through logp_t."""
        return self.log_probs - self.old_log_probs

    def param(self, name: str):
        value = getattr(self.params, name, None) if self.params is not None else None
        if value is None:
            raise ValueError(f"this policy loss needs the parameter `{name}` (algorithm.loss_params.{name})")
        return value


@dataclass(frozen=True)
class PolicyLoss:
    name: str
    fn: Callable[[PolicyLossInputs], tuple[Tensor, dict]]
    agg_mode: Optional[str] = None  # the aggregation the formula fixes; None: algorithm.loss_agg_mode
    dual_clip: bool = False  # reads clip_ratio_c (ppo only; real verl's vanilla is its only loss that does)
    own_is_weights: bool = False  # combines is_weights itself, instead of multiplying the per-token loss


POLICY_LOSSES: dict[str, PolicyLoss] = {}


def policy_loss(name: str, **traits):
    """Register `fn(PolicyLossInputs) -> (loss_mat, metrics)` as `algorithm.policy_loss: name`."""
    def register(fn):
        POLICY_LOSSES[name] = PolicyLoss(name, fn, **traits)
        return fn
    return register


def zero_metric(like: Tensor) -> Tensor:
    return torch.zeros((), dtype=like.dtype, device=like.device)


def clipped_surrogate(ratio: Tensor, advantages: Tensor, mask: Tensor, low: float, high: float,
                      clip_c: float) -> tuple[Tensor, dict]:
    """PPO's per-token loss (B, R) and its clipping fractions (masked token means):

        L_t = max(-A_t rho_t, -A_t clip(rho_t, 1 - low, 1 + high))
        if c > 1 and A_t < 0:  L_t = min(L_t, -c A_t)          (dual clip)
    """
    loss_unclipped = -advantages * ratio  # (B, R)
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    clipped = (loss_clipped > loss_unclipped).to(ratio.dtype)  # the bound took over
    metrics = {
        "pg_clipfrac": masked_mean(clipped, mask),
        "pg_clipfrac_high": masked_mean(clipped * (advantages > 0).to(ratio.dtype), mask),  # rho > 1 + high
        "pg_clipfrac_low": masked_mean(clipped * (advantages < 0).to(ratio.dtype), mask),  # rho < 1 - low
    }
    if clip_c and clip_c > 1.0:
        loss_dual = -advantages * clip_c  # (B, R) > 0 where A < 0
        negative = advantages < 0
        dual_active = negative & (loss > loss_dual)  # rho > c: the loss would grow without bound
        loss = torch.where(negative, torch.minimum(loss, loss_dual), loss)
        metrics["pg_clipfrac_lower"] = masked_mean(dual_active.to(ratio.dtype), mask)
    else:
        metrics["pg_clipfrac_lower"] = zero_metric(ratio)
    return loss, metrics
