"""Loss aggregation: how a (B, R) per-token loss becomes one scalar.

With L[i, t] the per-token loss, m[i, t] the mask, |y_i| = sum_t m[i, t] and S the number
of sequences that have at least one valid token:

  token-mean               sum_{i,t} m L / sum_{i,t} m
      Every token weighs the same, so long responses carry more weight. DAPO (Yu et al.
      2025, "token-level policy gradient loss") recommends it for long chain-of-thought,
      where per-sequence averaging lets long bad answers (repetition, gibberish) go unpunished.
  seq-mean-token-sum       (1/S) sum_i sum_t m L
      Each sequence contributes its summed loss: the plain REINFORCE estimator of the
      sequence-level objective. The scale grows with response length.
  seq-mean-token-mean      (1/S) sum_i (sum_t m L / |y_i|)
      The original GRPO (Shao et al. 2024) loss: each sequence weighs the same whatever its
      length. Per-token gradients are divided by |y_i|, which Dr. GRPO shows biases the
      policy towards longer wrong answers and shorter right ones.
  seq-mean-token-sum-norm  (1/S) sum_i (sum_t m L / R_max)
      Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): divide by a
      constant R_max (the generation budget) instead of |y_i|, which removes the length
      bias while keeping the loss scale independent of the batch's actual lengths.

Micro-batch invariance: a mini-batch is usually split into micro-batches that each run
forward/backward and accumulate gradients. Pass the mini-batch's global `num_tokens`
(sum of its mask), `num_seqs` (its sequences with a valid token) and `max_response_len`
(a constant such as rollout.max_new_tokens) to every micro-batch; each call then returns
that micro-batch's share and the shares sum exactly to the loss of the whole mini-batch
computed in one call. `count_tokens_and_seqs(mask)` gives the two counts. Without them,
the micro-batch's own counts are used (correct only when the micro-batch is the whole
mini-batch).

Sequences whose mask is all zero contribute 0 and are not counted in S; empty batches
give a loss of 0 (no NaN).
"""

from __future__ import annotations

from typing import Optional

import torch

from verl.algorithms.masked import masked_sum

Tensor = torch.Tensor

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _safe_div(num: Tensor, den) -> Tensor:
    """num / den, and 0 when den is 0 (then num is 0 too: nothing valid to average)."""
    den = torch.as_tensor(den, dtype=num.dtype, device=num.device)
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(num.dtype).tiny), torch.zeros_like(num))


def aggregate_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    num_tokens: Optional[float] = None,
    num_seqs: Optional[int] = None,
    max_response_len: Optional[int] = None,
) -> Tensor:
    """Reduce a per-token loss (B, R) to this batch's share of the mini-batch loss (scalar).

    num_tokens: valid tokens in the whole mini-batch (token-mean); default sum(mask).
    num_seqs: sequences with >= 1 valid token in the whole mini-batch (seq-* modes);
        default: counted in `mask`.
    max_response_len: the constant R_max of seq-mean-token-sum-norm; default R (the
        padded width of this batch, which differs between micro-batches, so pass it).
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode '{mode}' is not one of {', '.join(LOSS_AGG_MODES)}")
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss_mat {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} differ in shape")
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        total = masked_sum(loss_mat, mask)  # ()
        return _safe_div(total, mask.sum() if num_tokens is None else num_tokens)

    seq_len = mask.sum(dim=-1)  # (B,)
    seq_sum = masked_sum(loss_mat, mask, dim=-1)  # (B,)
    if mode == "seq-mean-token-sum":
        per_seq = seq_sum
    elif mode == "seq-mean-token-mean":
        per_seq = _safe_div(seq_sum, seq_len)  # (B,) 0 for empty rows
    else:  # seq-mean-token-sum-norm
        r_max = loss_mat.shape[-1] if max_response_len is None else max_response_len
        if r_max <= 0:
            raise ValueError(f"max_response_len must be > 0, got {r_max}")
        per_seq = seq_sum / r_max
    if num_seqs is None:
        num_seqs = (seq_len > 0).sum()
    return _safe_div(per_seq.sum(), num_seqs)
