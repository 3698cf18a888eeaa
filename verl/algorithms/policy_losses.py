"""Policy-gradient losses (to MINIMISE): per-token surrogate, then `aggregate_loss`.

Sign convention: advantages > 0 mean "make this token more likely"; the returned loss
is the negated surrogate objective, so gradient descent on it raises pi(token) where A > 0.

  ppo        Schulman et al. 2017 ("Proximal Policy Optimization Algorithms"), with
             asymmetric bounds (DAPO's clip-higher, Yu et al. 2025) and optional dual clip
             (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"):
                 rho_t = exp(logp_t - old_t)
                 L_t   = max(-A_t rho_t, -A_t clip(rho_t, 1 - eps_low, 1 + eps_high))
                 if c > 1 and A_t < 0:  L_t = min(L_t, -c A_t)
  gspo       Zheng et al. 2025 ("Group Sequence Policy Optimization"), GSPO-token form:
                 s_i    = exp( (1/|y_i|) sum_t m_t (logp_t - old_t) )        (sequence ratio)
                 s_i,t  = sg[s_i] * exp(logp_t - sg[logp_t])                  (value s_i,
                          gradient s_i * grad logp_t), then clipped like ppo with s_i,t.
  reinforce  L_t = -A_t logp_t (Williams 1992). Its gradient equals ppo's at rho = 1, i.e.
             for on-policy, single-epoch updates; no ratio, no clipping.

`is_weights` (B, R): optional truncated importance weights min(pi_old / pi_rollout, cap)
(TIS, Yao et al. 2025) that multiply the per-token loss, correcting for the rollout engine's
numerics differing from the trainer's. Treated as constants.
"""

from __future__ import annotations

from typing import Optional

import torch

from verl.algorithms.aggregation import aggregate_loss
from verl.algorithms.masked import masked_mean

Tensor = torch.Tensor

POLICY_LOSSES = ("ppo", "gspo", "reinforce")
_MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: keeps ratio and its gradient finite on garbage tokens


def _clipped_surrogate(ratio: Tensor, advantages: Tensor, mask: Tensor, low: float, high: float,
                       clip_c: float) -> tuple[Tensor, dict]:
    """Per-token PPO loss (B, R) and clipping fractions (masked token means)."""
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
        metrics["pg_clipfrac_lower"] = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    return loss, metrics


def compute_policy_loss(
    kind: str,
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = 0.0,
    loss_agg_mode: str = "token-mean",
    num_tokens: Optional[float] = None,
    num_seqs: Optional[int] = None,
    max_response_len: Optional[int] = None,
    is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict]:
    """Policy loss (scalar, this micro-batch's share, see `aggregate_loss`) and metrics.

    log_probs (B, R) carry gradient (current policy); old_log_probs, advantages, mask,
    is_weights (B, R) are constants. Metrics are detached 0-d tensors:
      pg_clipfrac        fraction of valid tokens where a PPO bound was active
      pg_clipfrac_high   ... the upper bound (A > 0, rho > 1 + high)
      pg_clipfrac_low    ... the lower bound (A < 0, rho < 1 - low)
      pg_clipfrac_lower  ... the dual-clip bound (A < 0, rho > c)
      ppo_kl             mean over valid tokens of old_logp - logp (approx. KL(old || new))
    """
    if kind not in POLICY_LOSSES:
        raise ValueError(f"policy loss '{kind}' is not one of {', '.join(POLICY_LOSSES)}")
    mask = mask.to(log_probs.dtype)
    old_log_probs = old_log_probs.detach()
    advantages = advantages.detach()
    log_ratio = log_probs - old_log_probs  # (B, R)
    zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    metrics = {"ppo_kl": masked_mean(-log_ratio.detach(), mask)}

    if kind == "reinforce":
        loss_mat = -advantages * log_probs  # (B, R)
        metrics.update(pg_clipfrac=zero, pg_clipfrac_high=zero, pg_clipfrac_low=zero, pg_clipfrac_lower=zero)
    else:
        if kind == "ppo":
            log_ratio_used = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        else:  # gspo
            seq_log_ratio = masked_mean(log_ratio.detach(), mask, dim=-1)  # (B,) log s_i
            # value log s_i on every token; gradient of token t flows only through logp_t
            log_ratio_used = seq_log_ratio[:, None] + log_probs - log_probs.detach()  # (B, R)
            log_ratio_used = log_ratio_used.clamp(max=10.0)
        ratio = torch.exp(log_ratio_used)
        loss_mat, clip_metrics = _clipped_surrogate(ratio, advantages, mask, clip_ratio_low,
                                                    clip_ratio_high, clip_ratio_c)
        metrics.update(clip_metrics)

    if is_weights is not None:
        loss_mat = loss_mat * is_weights.detach()
    loss = aggregate_loss(loss_mat, mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          max_response_len=max_response_len)
    return loss, {k: v.detach() for k, v in metrics.items()}
