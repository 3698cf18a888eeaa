"""Masked reductions over response tokens, and group-id bookkeeping.

A mask is a float (B, R) tensor with 1 on tokens that count and 0 elsewhere (padding,
and interior tokens the policy did not choose, e.g. tool output). Every reduction here
uses `torch.where` instead of multiplying by the mask, so a NaN/Inf sitting on a masked
position never leaks into the result, and an all-zero mask gives 0, never NaN.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

Tensor = torch.Tensor


def masked_sum(x: Tensor, mask: Tensor, dim: Optional[int] = None) -> Tensor:
    """sum(x * mask) over `dim` (all dims when None); masked entries contribute exactly 0."""
    mask = mask.to(x.dtype)
    contrib = torch.where(mask != 0, x * mask, torch.zeros_like(x))
    return contrib.sum() if dim is None else contrib.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: Optional[int] = None) -> Tensor:
    """sum(x * mask) / sum(mask); 0 where the mask sums to 0 (no NaN for empty rows)."""
    mask = mask.to(x.dtype)
    total = masked_sum(x, mask, dim)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return torch.where(count > 0, total / count.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(total))


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of the masked entries of x (all dims). Unbiased: divide by n - 1 (Bessel).

    Returns 0 when fewer than 2 entries (unbiased) or 0 entries (biased) are valid.
    """
    mask = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    sq = masked_sum((x - mean) ** 2, mask)
    n = mask.sum()
    denom = n - 1 if unbiased else n
    return torch.where(denom > 0, sq / denom.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(sq))


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Whiten the masked entries of x jointly over the whole tensor:

        y = (x - mean) / sqrt(var + eps)        (shift_mean=True)
        y = (x - mean) / sqrt(var + eps) + mean (shift_mean=False: rescale only)

    mean/var are over entries with mask != 0 (unbiased var). Masked entries of y are 0.
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    y = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        y = y + mean
    return torch.where(mask != 0, y, torch.zeros_like(y))


def count_tokens_and_seqs(mask: Tensor) -> tuple[float, int]:
    """(num_tokens, num_seqs) of a mini-batch, counted the way `aggregate_loss` counts:
    tokens = sum(mask); sequences = rows with at least one valid token.

    The trainer calls this once per mini-batch and passes both numbers to every
    micro-batch's loss so the micro-batch contributions sum to the mini-batch loss.
    """
    return float(mask.sum().item()), int((mask.sum(dim=-1) > 0).sum().item())


def group_index(group_ids: Sequence | Tensor, device=None) -> tuple[Tensor, int]:
    """Map arbitrary hashable group ids (B,) to dense ints 0..G-1 in order of first use.

    Returns (index (B,) long, G).
    """
    if isinstance(group_ids, Tensor):
        group_ids = group_ids.tolist()
    dense: dict = {}
    index = [dense.setdefault(g, len(dense)) for g in group_ids]
    return torch.tensor(index, dtype=torch.long, device=device), len(dense)


def group_stats(scores: Tensor, group_ids: Sequence | Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sequence statistics of the group it belongs to, each (B,):

        size_i = |g(i)|,  mean_i = mean_{j in g(i)} r_j,
        std_i  = sqrt(sum_{j in g(i)} (r_j - mean_i)^2 / (|g(i)| - 1))   (unbiased; 0 when |g| = 1)
    """
    if len(group_ids) != scores.shape[0]:
        raise ValueError(f"group_ids has {len(group_ids)} entries but scores has {scores.shape[0]}")
    idx, num_groups = group_index(group_ids, scores.device)
    r = scores.to(torch.float64)  # group sums in float64: exact for the small groups used here
    size = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(r))
    total = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, r)
    mean = (total / size)[idx]
    sq = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, (r - mean) ** 2)
    n = size[idx]
    std = torch.where(n > 1, torch.sqrt(sq[idx] / (n - 1).clamp_min(1)), torch.zeros_like(r))
    return n.to(scores.dtype), mean.to(scores.dtype), std.to(scores.dtype)
