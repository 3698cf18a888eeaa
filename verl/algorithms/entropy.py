"""Entropy of the policy's next-token distribution, from logits."""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def entropy_from_logits(logits: Tensor) -> Tensor:
    """H(softmax(z)) = -sum_v p_v log p_v over the last dim, in the log-sum-exp form

        H = logsumexp(z) - sum_v p_v z_v,     p = softmax(z)

    which never takes log of an underflowed probability and is exact for any shift of z.
    logits (..., V) -> (...). Logits must be finite (raw model logits are); computed in the
    logits' dtype, so pass float32 logits for an accurate entropy.
    """
    lse = torch.logsumexp(logits, dim=-1)  # (...)
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    return lse - (probs * logits).sum(dim=-1)
