"""Critic loss and diagnostics."""

from __future__ import annotations

from typing import Optional

import torch

from verl.algorithms.aggregation import aggregate_loss
from verl.algorithms.masked import masked_mean, masked_var

Tensor = torch.Tensor


def compute_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    cliprange_value: Optional[float],
    loss_agg_mode: str = "token-mean",
    num_tokens: Optional[float] = None,
    num_seqs: Optional[int] = None,
    max_response_len: Optional[int] = None,
) -> tuple[Tensor, dict]:
    """Clipped value loss (PPO2 baselines; Schulman et al. 2017):

        V_clip = V_old + clip(V - V_old, -c, c)
        L_t    = 0.5 * max( (V - R)^2, (V_clip - R)^2 )

    values (B, R) carry gradient; old_values (critic at rollout time) and returns are
    constants. cliprange_value None or <= 0 turns clipping off (L_t = 0.5 (V - R)^2).
    Metrics (detached 0-d tensors): vf_clipfrac = fraction of valid tokens where the
    clipped term was the larger one; vpred_mean = masked mean of V.
    """
    mask = mask.to(values.dtype)
    returns = returns.detach()
    err_unclipped = (values - returns).square()  # (B, R)
    if cliprange_value is not None and cliprange_value > 0:
        old_values = old_values.detach()
        v_clipped = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
        err_clipped = (v_clipped - returns).square()
        loss_mat = 0.5 * torch.maximum(err_unclipped, err_clipped)
        clipfrac = masked_mean((err_clipped > err_unclipped).to(values.dtype), mask)
    else:
        loss_mat = 0.5 * err_unclipped
        clipfrac = torch.zeros((), dtype=values.dtype, device=values.device)
    loss = aggregate_loss(loss_mat, mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          max_response_len=max_response_len)
    metrics = {"vf_clipfrac": clipfrac.detach(), "vpred_mean": masked_mean(values.detach(), mask)}
    return loss, metrics


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var[R - V] / Var[R] over valid tokens: 1 = perfect critic, 0 = no better than a
    constant, < 0 = worse. Returns 0.0 when Var[R] = 0 (undefined; avoids a NaN metric)."""
    var_returns = masked_var(returns, mask)
    if float(var_returns) <= 0.0:
        return 0.0
    return float(1.0 - masked_var(returns - values, mask) / var_returns)
