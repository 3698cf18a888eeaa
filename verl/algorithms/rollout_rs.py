"""Rejection sampling of the rollout correction: tokens (or whole responses) on which pi_old and the
engine disagree too much are taken OUT of the response mask, so they leave the loss's numerator and
its denominator (a token-mean divides by the tokens that remain). Real verl 0.9.1's
compute_rollout_rejection_mask, the same options and thresholds.

With l_t = clamp(log pi_old(y_t) - log pi_engine(y_t), -20, 20), three per-token divergences:

    k1_t = -l_t                    (log pi_engine / pi_old; 0 when they agree)
    k2_t = l_t^2 / 2
    k3_t = exp(l_t) - 1 - l_t      (>= 0)

An option is a statistic and a level:

    token_k1, token_k2, token_k3          the token's own k           -> rejects that token
    seq_sum_k{1,2,3}                      sum_t m_t k_t               -> rejects the whole response
    seq_mean_k{1,2,3}                     sum_t m_t k_t / sum_t m_t   -> (seq_mean_k1: the log geometric mean)
    seq_max_k{2,3}                        max_t over valid tokens     ->

Thresholds: a k1 option keeps  log(L) <= stat <= log(U)  for "L_U" (a single "U" means L = 1/U): for
token_k1 that is L <= pi_engine / pi_old <= U. The k2 / k3 options keep  stat <= U  (a single number).
Several options are comma-separated ("token_k1,seq_max_k2") and must all pass; `rollout_rs_threshold`
then gives one threshold for all or one per option ("0.6_1.6,2.5").
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from verl.algorithms.masked import masked_mean, masked_sum
from verl.algorithms.rollout_is import SAFETY_BOUND

Tensor = torch.Tensor

RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


class RejectionRule(NamedTuple):
    option: str  # one of RS_OPTIONS
    lower_log: Optional[float]  # k1: log(L); else None
    upper: float  # k1: log(U); else U


def parse_rejection(options: str, thresholds) -> tuple[RejectionRule, ...]:
    """The rules of `rollout_rs` with `rollout_rs_threshold` (module docstring); ValueError naming
    what is wrong. Duplicate options count once."""
    names = list(dict.fromkeys(o.strip() for o in str(options).split(",") if o.strip()))
    if not names:
        raise ValueError("expected one or more options separated by commas")
    for name in names:
        if name not in RS_OPTIONS:
            raise ValueError(f"'{name}' is not one of {', '.join(RS_OPTIONS)}")
    if thresholds is None or isinstance(thresholds, bool):
        raise ValueError("rollout_rs_threshold must be given with rollout_rs")
    specs = [s.strip() for s in str(thresholds).split(",") if s.strip()]
    if len(specs) == 1:
        specs = specs * len(names)
    if len(specs) != len(names):
        raise ValueError(f"{len(specs)} thresholds for {len(names)} options: give one for all, or one per option")
    return tuple(_rule(name, spec) for name, spec in zip(names, specs))


def _rule(name: str, spec: str) -> RejectionRule:
    bad = ValueError(f"bad threshold '{spec}' for {name}: a k1 option takes 'lower_upper' (0 < lower <= upper) or "
                     f"one number U > 0 (lower 1/U), the k2 / k3 options one number > 0")
    if name.endswith("k1"):
        try:
            lo, hi = (float(x) for x in spec.split("_", 1)) if "_" in spec else (1.0 / float(spec), float(spec))
        except (ValueError, ZeroDivisionError):
            raise bad from None
        if not 0 < lo <= hi:
            raise bad
        return RejectionRule(name, math.log(lo), math.log(hi))
    if "_" in spec:
        raise ValueError(f"{name} takes one number as its threshold, not 'lower_upper': got '{spec}'")
    try:
        upper = float(spec)
    except ValueError:
        raise bad from None
    if not upper > 0:
        raise bad
    return RejectionRule(name, None, upper)


@torch.no_grad()
def rejection_mask(log_ratio: Tensor, mask: Tensor, rules: tuple[RejectionRule, ...]) -> tuple[Tensor, dict]:
    """(mask with the rejected tokens set to 0 (B, R), statistics as floats named as real verl's
    rollout_corr/rollout_rs_*): the share of valid tokens rejected, overall and by each option, and
    the share of responses with at least one token rejected."""
    mask = mask.to(log_ratio.dtype)
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    divergence = {"k1": -lr, "k2": 0.5 * lr * lr, "k3": torch.exp(lr) - 1.0 - lr}  # (B, R) each
    keep_all = torch.ones_like(mask, dtype=torch.bool)
    stats: dict = {}
    for rule in rules:
        level, k = rule.option.rsplit("_", 1)
        stat = _aggregate(divergence[k], mask, level)  # (B, R) token or (B, 1) sequence
        keep = stat <= rule.upper
        if rule.lower_log is not None:
            keep = keep & (stat >= rule.lower_log)
        keep = keep.expand_as(mask)
        keep_all &= keep
        stats[f"rollout_rs_{rule.option}_masked_fraction"] = _fraction(~keep, mask)
    new_mask = mask * keep_all.to(mask.dtype)
    stats["rollout_rs_masked_fraction"] = _fraction(~keep_all, mask)
    rows = mask.shape[0]
    stats["rollout_rs_seq_masked_fraction"] = float(((~keep_all) & (mask > 0)).any(dim=-1).float().sum()
                                                   / max(rows, 1))
    return new_mask, stats


def _aggregate(k: Tensor, mask: Tensor, level: str) -> Tensor:
    """token: k itself (B, R); seq_sum / seq_mean / seq_max over the valid tokens: (B, 1)."""
    if level == "token":
        return k
    if level == "seq_sum":
        return masked_sum(k, mask, dim=-1)[:, None]
    if level == "seq_mean":
        return masked_mean(k, mask, dim=-1)[:, None]
    top = torch.where(mask > 0, k, torch.full_like(k, float("-inf"))).max(dim=-1).values  # seq_max
    return torch.where(torch.isinf(top), torch.zeros_like(top), top)[:, None]


def _fraction(rejected: Tensor, mask: Tensor) -> float:
    return float(masked_mean(rejected.to(mask.dtype), mask)) if (mask > 0).any() else 0.0
