"""Forming micro-batches (by sequence count or by token budget) and trimming padding.

Losses are normalised by mini-batch-global token/sequence counts (see
`verl.algorithms.aggregation`), so how a mini-batch is cut into micro-batches changes
memory and speed, never the gradient.
"""

from __future__ import annotations

from typing import Optional

import torch

from verl.batch import Batch


def seq_token_counts(batch: Batch) -> list[int]:
    return batch.attention_mask.sum(dim=1).tolist()


def make_micro_batches(batch: Batch, micro_batch_size: int, max_tokens: Optional[int] = None) -> list[Batch]:
    """Consecutive micro-batches of `micro_batch_size` sequences, or, with `max_tokens`,
    groups whose real (unpadded) token total stays within the budget (a sequence longer
    than the budget gets a micro-batch of its own)."""
    if not max_tokens:
        return batch.split(micro_batch_size)
    groups, current, used = [], [], 0
    for i, n in enumerate(seq_token_counts(batch)):
        if current and used + n > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        groups.append(current)
    return [batch.select(g) for g in groups]


def trim_padding(batch: Batch) -> Batch:
    """Drop prompt columns that are padding in every row (left) and response columns that
    are padding in every row (right). All (B, R) fields are cut alike."""
    p, r = batch.prompt_length, batch.response_length
    prompt_real = batch.attention_mask[:, :p].any(dim=0)
    resp_real = batch.attention_mask[:, p:].any(dim=0)
    first = int(prompt_real.float().argmax()) if bool(prompt_real.any()) else p - 1
    last = int(resp_real.nonzero().max()) + 1 if bool(resp_real.any()) else 1
    if first == 0 and last == r:
        return batch
    changes = {}
    for name in Batch.tensor_fields():
        value = getattr(batch, name)
        if value is None or value.dim() != 2:
            continue
        if value.shape[1] == p + r:
            changes[name] = torch.cat([value[:, first:p], value[:, p:p + last]], dim=1)
        elif value.shape[1] == r:
            changes[name] = value[:, :last]
    return batch.replace(**changes)


def pad_response_columns(x: torch.Tensor, length: int) -> torch.Tensor:
    """Right-pad a (b, r') tensor with zeros back to (b, length)."""
    if x.shape[1] == length:
        return x
    return torch.nn.functional.pad(x, (0, length - x.shape[1]))
