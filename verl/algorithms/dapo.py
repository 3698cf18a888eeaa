"""DAPO extras (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at
Scale"): overlong reward shaping and dynamic sampling. Clip-higher and the token-level loss
are settings of `compute_policy_loss` (clip_ratio_high, loss_agg_mode="token-mean")."""

from __future__ import annotations

from typing import Sequence

import torch

from verl.algorithms.masked import group_index

Tensor = torch.Tensor


def overlong_penalty(response_lengths: Tensor, max_len: int, buffer_len: int, penalty_factor: float = 1.0) -> Tensor:
    """Soft overlong punishment (DAPO eq. 13), added to the sequence's reward. With
    L_max = max_len, L_cache = buffer_len, L = response length:

        0                                        L <= L_max - L_cache
        -(L - (L_max - L_cache)) / L_cache * f   L_max - L_cache < L <= L_max
        -f                                       L > L_max

    response_lengths (B,) -> (B,) float.
    """
    if buffer_len < 0 or buffer_len > max_len:
        raise ValueError(f"buffer_len must be in [0, max_len={max_len}], got {buffer_len}")
    length = response_lengths.to(torch.float32)
    start = float(max_len - buffer_len)  # penalty starts after this many tokens
    ramp = -(length - start) / max(buffer_len, 1) * penalty_factor
    out = torch.where(length <= start, torch.zeros_like(length), ramp)
    return torch.where(length > max_len, torch.full_like(length, -penalty_factor), out)


def dynamic_sampling_keep(scores: Tensor, group_ids: Sequence, atol: float = 0.0) -> Tensor:
    """Dynamic sampling (DAPO section 3.2): keep a group only if its scores are not all equal
    (max - min > atol). A group whose samples all score the same (all right, all wrong) has
    zero group-relative advantage and so gives no gradient; a group of size 1 is dropped too.

    scores (B,) -> keep (B,) bool.
    """
    idx, num_groups = group_index(group_ids, scores.device)
    r = scores.to(torch.float64)
    hi = torch.full((num_groups,), float("-inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, idx, r, "amax")
    lo = torch.full((num_groups,), float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, idx, r, "amin")
    return ((hi - lo) > atol)[idx]
