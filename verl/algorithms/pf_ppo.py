"""Preference-feedback PPO reweighting (real verl's `algorithm.use_pf_ppo`): after GAE's advantages, the batch
is resampled with replacement, each sequence drawn with probability proportional to a weight of its score.

    idx = pf_ppo_indices(scores, "pow", 2.0)    # (B,) rows of the batch, drawn with replacement
    batch = batch.select(idx)                   # the update trains on the resampled batch

Pure functions; the trainer applies them (verl.trainer.trainer.Trainer.compute_advantages).
"""

from __future__ import annotations

from typing import Optional

import torch

REWEIGHT_METHODS = ("pow", "max_min", "max_random")
FLOOR = 1e-8  # every sequence keeps a nonzero chance (real verl's clamp)


def pf_ppo_weights(scores: torch.Tensor, method: str, weight_pow: float) -> torch.Tensor:
    """(B,) sampling weights of the sequences' scores s_i (each sequence's summed token-level score, before
    any KL penalty), as real verl's compute_pf_ppo_reweight_data computes them:

        pow:         w_i = |s_i| ** weight_pow
        max_min:     w_i = 1 if s_i == max_j s_j or s_i == min_j s_j, else 0
        max_random:  w_i = 0.4 if s_i == max_j s_j, else 0.1

    then w_i = max(w_i + 1e-8, 1e-8). The weights need not sum to 1 (torch.multinomial normalises them).
    """
    if method not in REWEIGHT_METHODS:
        raise ValueError(f"pf_ppo reweight method {method!r} is not one of {', '.join(REWEIGHT_METHODS)}")
    scores = scores.float()
    if method == "pow":
        weights = scores.abs().pow(weight_pow)
    elif method == "max_min":
        weights = ((scores == scores.max()) | (scores == scores.min())).float()
    else:
        weights = torch.where(scores == scores.max(), 0.4, 0.1)
    return torch.clamp(weights + FLOOR, min=FLOOR)


def pf_ppo_indices(scores: torch.Tensor, method: str, weight_pow: float,
                   generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """(B,) long indices of the resampled batch: B draws with replacement, row i with probability
    w_i / sum_j w_j (pf_ppo_weights)."""
    weights = pf_ppo_weights(scores.detach().cpu(), method, weight_pow)
    return torch.multinomial(weights, len(weights), replacement=True, generator=generator)
