"""Forming micro-batches (by sequence count or by token budget), trimming padding, and
bringing one micro-batch onto the device for a forward pass.

Losses are normalised by mini-batch-global token/sequence counts (see
`verl.algorithms.aggregation`), so how a mini-batch is cut into micro-batches changes
memory and speed, never the gradient.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import torch

from verl.batch import Batch
from verl.workers.optim import autocast_context
from verl.workers.packing import PackingUnsupported, pack_batch, prepare_packing


@dataclasses.dataclass(frozen=True)
class MicroBatching:
    """How every worker cuts a batch into forward/backward passes: `size` sequences each, or,
    with `max_tokens`, as many as fit that token budget (counted packed or padded, see
    `make_micro_batches`); `packed` also selects the padding-free forward. The
    training.micro_batch_size / max_tokens_per_micro_batch / use_packed_samples triple."""

    size: int
    max_tokens: Optional[int] = None
    packed: bool = False
    packed_by_default: bool = False  # packing chosen by training.use_packed_samples: auto, not asked for

    @classmethod
    def from_training(cls, training_cfg) -> "MicroBatching":
        t = training_cfg
        return cls(t.micro_batch_size, t.max_tokens_per_micro_batch, bool(t.use_packed_samples),
                   t.packed_by_default)

    def with_packing(self, trunk: torch.nn.Module, role: str) -> tuple[Optional[str], "MicroBatching"]:
        """(packing method or None, the micro-batching `role` runs) for the model `trunk`:
        `prepare_packing`'s method when packed; where packing was only the default and the model
        cannot be packed, padded micro-batches and one log line (asked for, the error stands)."""
        if not self.packed:
            return None, self
        try:
            return prepare_packing(trunk), self
        except PackingUnsupported as exc:
            if not self.packed_by_default:
                raise
            print(f"verl: {role} runs padded micro-batches: {exc}", flush=True)
            return None, dataclasses.replace(self, packed=False)

    def split(self, batch: Batch) -> list[Batch]:
        return make_micro_batches(batch, self.size, self.max_tokens, self.packed)

    def count(self, batch: Batch) -> int:
        """How many micro-batches `batch` makes (0 for no rows)."""
        return len(self.split(batch)) if len(batch) else 0

    def halved(self) -> "MicroBatching":
        """Micro-batches of half the token budget, or without one half the sequences (at
        least 1): the retry after an out-of-memory error. Equal to self when nothing shrinks."""
        if self.max_tokens:
            return dataclasses.replace(self, max_tokens=max(1, self.max_tokens // 2))
        return dataclasses.replace(self, size=max(1, self.size // 2))


@contextlib.contextmanager
def on_device(mb: Batch, device: torch.device, packed: bool, dtype: torch.dtype, compiled=None):
    """The prelude of every forward over a micro-batch: padding trimmed, the packed row built
    on the CPU side (no wait for the GPU), tensors copied without blocking, then the block
    runs under autocast to `dtype` (and `compiled` layers, a `CompiledLayers`, when given).
    Yields (mb on the device, PackedBatch on the device or None)."""
    mb = trim_padding(mb)
    pk = pack_batch(mb.input_ids, mb.attention_mask, mb.response_length).to(device) if packed else None
    mb = batch_to_device(mb, device)
    with autocast_context(device, dtype), (compiled.active() if compiled is not None else contextlib.nullcontext()):
        yield mb, pk


def seq_token_counts(batch: Batch) -> list[int]:
    return batch.attention_mask.sum(dim=1).tolist()


def _real_lengths(batch: Batch):
    """Cost of rows [first..i] as one padded micro-batch after `trim_padding`:
    rows x (longest real prompt + longest real response) -- the (b, t) block the model sees."""
    p = batch.prompt_length
    prompt_len = batch.attention_mask[:, :p].sum(dim=1).tolist()
    resp_len = batch.attention_mask[:, p:].sum(dim=1).tolist()
    return prompt_len, resp_len


def make_micro_batches(batch: Batch, micro_batch_size: int, max_tokens: Optional[int] = None,
                       packed: bool = False) -> list[Batch]:
    """Consecutive micro-batches of `micro_batch_size` sequences, or, with `max_tokens`, of
    as many consecutive sequences as fit the token budget:

      packed  the packed row length, i.e. the sum of real (unpadded) token counts
      padded  the trimmed padded block, rows x (longest prompt + longest response) of the group

    A sequence longer than the budget gets a micro-batch of its own. Row order is kept, so
    per-row outputs concatenate back in order; losses use mini-batch-global counts, so the
    grouping changes memory and speed, never the gradient."""
    if not max_tokens:
        return batch.split(micro_batch_size)
    groups: list[list[int]] = []
    current: list[int] = []
    if packed:
        used = 0
        for i, n in enumerate(seq_token_counts(batch)):
            if current and used + n > max_tokens:
                groups.append(current)
                current, used = [], 0
            current.append(i)
            used += n
    else:
        prompt_len, resp_len = _real_lengths(batch)
        max_p = max_r = 0
        for i in range(len(batch)):
            np_, nr = max(max_p, prompt_len[i]), max(max_r, resp_len[i])
            if current and (len(current) + 1) * (np_ + nr) > max_tokens:
                groups.append(current)
                current, np_, nr = [], prompt_len[i], resp_len[i]
            current.append(i)
            max_p, max_r = np_, nr
    if current:
        groups.append(current)
    return [batch.select(g) for g in groups]


def trim_padding(batch: Batch) -> Batch:
    """Drop prompt columns that are padding in every row (left) and response columns that
    are padding in every row (right). All (B, R) fields are cut alike, and (B, P + R, ...) ones
    (routed_experts) along their second dimension."""
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
        if value is None or value.dim() < 2:
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


def tensor_to_device(t: torch.Tensor, device) -> torch.Tensor:
    """CPU -> CUDA through pinned memory without blocking the host (a pageable copy waits for
    all queued GPU work, which stalls the pipeline between micro-batches)."""
    device = torch.device(device)
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def batch_to_device(batch: Batch, device) -> Batch:
    """`Batch.to` with non-blocking pinned copies of the tensor fields."""
    changes = {name: tensor_to_device(getattr(batch, name), device) for name in Batch.tensor_fields()
               if getattr(batch, name) is not None}
    return batch.replace(**changes)
