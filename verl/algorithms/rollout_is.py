"""Importance weights of the rollout correction: pi_old (the policy the loss is taken against) over
pi_engine (the engine that sampled the token, possibly updates old, with other kernels or precision).

With log r_t = log pi_old(y_t) - log pi_engine(y_t), clamped to [-20, 20] before exp (exp(20) ~ 5e8):

    token     w_t = exp(log r_t)                                   one weight per token
    sequence  w_i = exp(sum_t m_t log r_t) = prod_t r_t            one weight per response, on all its tokens

then, by the threshold (`parse_is_threshold`):

    "U" (TIS, truncated IS)        w <- min(w, U)
    "L_U" (IcePop)                 w <- w if L <= w <= U else 0    (the token stays in the loss's
                                                                    denominator: only its weight is 0)

and with batch normalisation w <- w / mean(w), the mean over the batch's valid tokens (token) or over
its sequences with a valid token, each counted once (sequence), when that mean is > 1e-8. Weights
are 0 on masked positions and carry no gradient. The semantics are real verl 0.9.1's
(compute_rollout_correction_weights), so its scripts train the same here.
"""

from __future__ import annotations

from typing import Optional

import torch

from verl.algorithms.masked import masked_mean, masked_sum

Tensor = torch.Tensor

IS_LEVELS = ("token", "sequence")
SAFETY_BOUND = 20.0  # |log ratio| cap before exp


def parse_is_threshold(spec) -> tuple[float, Optional[float]]:
    """(upper, lower or None) of a threshold: a number U (or "U") or "L_U"; ValueError naming
    what is wrong (0 < L <= U)."""
    if isinstance(spec, bool) or spec is None:
        raise ValueError(f"expected a number or 'lower_upper', got {spec!r}")
    text = str(spec).strip()
    try:
        lower, upper = (float(x) for x in text.split("_", 1)) if "_" in text else (None, float(text))
    except ValueError:
        raise ValueError(f"expected a number or 'lower_upper' (e.g. 2.0 or 0.5_5.0), got {spec!r}") from None
    if not upper > 0:
        raise ValueError(f"the upper bound must be > 0, got {spec!r}")
    if lower is not None and not 0 < lower <= upper:
        raise ValueError(f"the lower bound must be in (0, upper], got {spec!r}")
    return upper, lower


@torch.no_grad()
def is_weights(log_ratio: Tensor, mask: Tensor, level: str, upper: float, lower: Optional[float] = None,
               batch_normalize: bool = False) -> tuple[Tensor, dict]:
    """Weights (B, R) (module docstring) and their statistics (floats, named as real verl's
    rollout_corr/rollout_is_*). log_ratio, mask: (B, R); mask 1 on tokens that count."""
    if level not in IS_LEVELS:
        raise ValueError(f"importance-sampling level '{level}' is not one of {', '.join(IS_LEVELS)}")
    mask = mask.to(log_ratio.dtype)
    if level == "token":
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * mask
    else:
        seq_log = masked_sum(log_ratio, mask, dim=-1)  # (B,) log prod_t r_t
        raw = torch.exp(seq_log.clamp(-SAFETY_BOUND, SAFETY_BOUND))[:, None] * mask  # (B, R)
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    stats = _stats(weights, raw, mask, upper, lower if lower is not None else 1.0 / upper)
    if batch_normalize:
        if level == "token":
            mean = masked_mean(weights, mask)
        else:
            has_token = (mask.sum(dim=-1) > 0).to(weights.dtype)  # (B,)
            per_seq = masked_mean(weights, mask, dim=-1)  # (B,) the sequence's one weight
            mean = (per_seq * has_token).sum() / has_token.sum().clamp_min(1e-8)
        factor = float(mean) if float(mean) > 1e-8 else 1.0
        weights = weights / factor
        stats["rollout_is_batch_norm_factor"] = factor
    return weights, stats


def _stats(weights: Tensor, raw: Tensor, mask: Tensor, upper: float, lower: float) -> dict:
    """mean / max / min of the applied weights over valid tokens, the share of valid tokens whose raw
    weight is above upper / below lower, and the effective sample size 1 / mean((w / mean w)^2)."""
    valid = mask > 0
    if not valid.any():
        return {"rollout_is_mean": 1.0, "rollout_is_max": 1.0, "rollout_is_min": 1.0,
                "rollout_is_ratio_fraction_high": 0.0, "rollout_is_ratio_fraction_low": 0.0,
                "rollout_is_eff_sample_size": 1.0}
    mean = masked_mean(weights, mask)
    normed = weights / (mean + 1e-8)
    return {"rollout_is_mean": float(mean), "rollout_is_max": float(weights[valid].max()),
            "rollout_is_min": float(weights[valid].min()),
            "rollout_is_ratio_fraction_high": float(masked_mean((raw > upper).to(mask.dtype), mask)),
            "rollout_is_ratio_fraction_low": float(masked_mean((raw < lower).to(mask.dtype), mask)),
            "rollout_is_eff_sample_size": float(1.0 / masked_mean(normed * normed, mask).clamp_min(1e-12))}
