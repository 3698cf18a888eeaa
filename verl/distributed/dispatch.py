"""Splitting a Batch across data-parallel ranks and putting the answers back together.

Two rules make a data-parallel run compute what the single-process run computes:

1. Balanced, equal-sized shares. `balanced_partition` gives each rank the same number of
   rows (+-1) and, among those, near-equal token totals (longest rows first, each to the
   lightest rank that still has room), so no rank waits long for the slowest.
2. The same number of forward passes on every rank. FSDP all-gathers each layer in every
   forward, so ranks must run equally many micro-batches or the collectives pair up wrong
   and hang. `pad_to_micro_batches` appends dummy rows (a copy of a real row with
   `response_mask` zero: no loss, no gradient, no count) to the ranks that would run fewer.
   The count is taken from the workers' own `MicroBatching` (verl.workers.micro_batches), so
   it holds for both sequence-count and token-budget micro-batching.

Results come back per rank (dummy rows dropped) and are scattered to their original rows.
"""

from __future__ import annotations

from typing import Sequence

import torch

from verl.batch import Batch
from verl.workers.micro_batches import MicroBatching

# Update metrics that every rank computes identically (global gradient norm, learning rate,
# explained variance on the whole batch): reduced by taking rank 0's value. Every other
# update metric is a rank's token-share-weighted partial sum and is summed over ranks.
REPLICATED_METRIC_SUFFIXES = ("grad_norm", "lr", "nonfinite_updates", "explained_var")


def balanced_partition(token_counts: Sequence[int], parts: int) -> list[list[int]]:
    """Row indices in `parts` groups of sizes n//parts or n//parts + 1 with balanced token
    totals (greedy longest-processing-time with a size cap); each group in ascending order."""
    n = len(token_counts)
    sizes = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    groups: list[list[int]] = [[] for _ in range(parts)]
    load = [0] * parts
    for i in sorted(range(n), key=lambda i: (-int(token_counts[i]), i)):
        open_ = [g for g in range(parts) if len(groups[g]) < sizes[g]]
        g = min(open_, key=lambda g: (load[g], len(groups[g]), g))
        groups[g].append(i)
        load[g] += int(token_counts[i])
    return [sorted(g) for g in groups]


def token_counts(batch: Batch) -> list[int]:
    return batch.attention_mask.sum(dim=1).tolist()


def dummy_rows(template: Batch, k: int) -> Batch:
    """k copies of the template's first row with response_mask zero (they count nowhere)."""
    row = template.select([0] * k)
    return row.replace(response_mask=torch.zeros_like(row.response_mask))


def pad_to_micro_batches(parts: list[Batch], template: Batch, micro: MicroBatching) -> list[Batch]:
    """Append dummy rows so every part makes the same number of micro-batches."""
    counts = [micro.count(p) for p in parts]
    target = max(counts)
    out = []
    for part, count in zip(parts, counts):
        added = 0
        while count < target:
            # Appending a row adds at most one micro-batch, so this stops exactly at target.
            part = Batch.concat([part, dummy_rows(template, 1)]) if len(part) else dummy_rows(template, 1)
            count = micro.count(part)
            added += 1
            if added > 64 * (target + 1):
                raise RuntimeError("could not equalise micro-batch counts across ranks (micro-batching rule "
                                   "not monotone in appended rows?)")
        out.append(part)
    return out


def shard_for_ranks(batch: Batch, world_size: int, micro: MicroBatching) -> tuple[list[list[int]], list[Batch]]:
    """(row indices per rank, the rank's Batch padded with dummy rows). `micro`: the
    micro-batching the ranks use."""
    index = balanced_partition(token_counts(batch), world_size)
    parts = [batch.select(ix) for ix in index]
    return index, pad_to_micro_batches(parts, batch, micro)


def rank_share(mini: Batch, rank: int, world_size: int, micro: MicroBatching) -> Batch:
    """This rank's rows of a mini-batch that every rank holds whole (deterministic: all ranks
    compute the same partition without talking)."""
    return shard_for_ranks(mini, world_size, micro)[1][rank]


def gather_rows(index: list[list[int]], results: list, total: int):
    """Inverse of `shard_for_ranks` for per-row outputs: a tensor (rows, ...) per rank, or a
    tuple of such tensors; dummy rows at the end of each rank's output are dropped."""
    if isinstance(results[0], tuple):
        return tuple(gather_rows(index, [r[k] for r in results], total) for k in range(len(results[0])))
    first = results[0]
    out = torch.zeros((total,) + tuple(first.shape[1:]), dtype=first.dtype)
    for ix, res in zip(index, results):
        if ix:
            out[torch.as_tensor(ix, dtype=torch.long)] = res[: len(ix)]
    return out


def reduce_update_metrics(per_rank: list[dict]) -> dict:
    """Sum the token-share partial sums, take rank 0's value for replicated metrics."""
    out = {}
    for key in per_rank[0]:
        if key.endswith(REPLICATED_METRIC_SUFFIXES):
            out[key] = per_rank[0][key]
        else:
            out[key] = float(sum(m.get(key, 0.0) for m in per_rank))
    return out
