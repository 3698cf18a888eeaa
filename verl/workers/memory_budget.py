"""A token budget per micro-batch from the free GPU memory, for the default settings.

With `training.max_tokens_per_micro_batch` unset on a CUDA device, each worker derives one
(`TokenBudget`) at its first micro-batched pass: then the models are loaded and the rollout
engine sleeps, so the free memory is what the worker really has. A trainable worker sizes it
for its update and uses it for its no-grad passes too, so that pi_old and the update's first
forward see the same micro-batches (the ratio is exactly 1 there). On the CPU, or with the
key set, micro-batching is what the config says.

The estimate, in bytes (a conservative one; an out-of-memory error in the update is still
retried once with half the budget, `verl.workers.update_loop`):

    layer     = a * (8 H + 4 I) + 16 H     one decoder layer's activations per token:
                                           a = bytes per element of the compute dtype,
                                           8 H: norm outputs, q, k, v, attention output and
                                           the projections' inputs; 4 I: the MLP's gate, up,
                                           activation and product; 16 H: the float32 residual
                                           stream and norm statistics (4 float32 vectors)
    per token = (L + 1) * layer            training: every layer's saved activations, plus
                                           one layer's temporaries in the backward
              = L * 4 H + 2 * layer        training with gradient checkpointing: each layer's
                                           float32 input, one layer recomputed with its backward
              = 2 * layer                  no-grad passes: one layer at a time
              + a * V                      with training.logprob_keep_logits (kept logits)
    head      = C * V * (a + 12)           the chunked LM head (C = training.logprob_chunk_size):
                                           logits in the matmul dtype, three float32 temporaries
                                           (upcast, softmax, dL/dz); 0 for a value model
    budget    = (0.7 * available - pending - head) // per token, at least 1

available: the device's free memory plus what PyTorch's allocator holds unused. pending: what
the worker's passes allocate beyond activations (`pending_bytes`): gradients, AdamW's moments
before the first step, autocast's compute-dtype copies of float32 weights. 0.7 leaves room
for fragmentation and for what the estimate leaves out (attention workspaces, the loss
terms, optimizer state that other workers allocate later). Eager attention keeps T x T scores per head, which this does not count: with
`model.attn_implementation: eager` set the budget by hand.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

from verl.workers.micro_batches import MicroBatching

USABLE_FRACTION = 0.7


@dataclasses.dataclass(frozen=True)
class ModelShape:
    hidden: int  # H
    layers: int  # L
    intermediate: int  # I, the MLP width
    vocab: int  # V of the LM head; 0 for a value model (no LM head)

    @classmethod
    def of(cls, hf_config, lm_head: bool) -> "ModelShape":
        c = hf_config.get_text_config()
        inner = getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * c.hidden_size
        return cls(c.hidden_size, c.num_hidden_layers, inner, c.vocab_size if lm_head else 0)


def bytes_per_token(shape: ModelShape, act_bytes: int, training: bool, checkpointing: bool,
                    keep_logits: bool) -> int:
    h, i = shape.hidden, shape.intermediate
    layer = act_bytes * (8 * h + 4 * i) + 16 * h
    if not training:
        return 2 * layer
    per_token = shape.layers * 4 * h + 2 * layer if checkpointing else (shape.layers + 1) * layer
    return per_token + (act_bytes * shape.vocab if keep_logits else 0)


def token_budget(available: int, pending: int, shape: ModelShape, act_bytes: int, *, training: bool,
                 checkpointing: bool, chunk_size: int, keep_logits: bool) -> int:
    """Tokens per micro-batch (see the module docstring), at least 1."""
    head = chunk_size * shape.vocab * (act_bytes + 12)
    usable = int(USABLE_FRACTION * available) - pending - head
    return max(1, usable // bytes_per_token(shape, act_bytes, training, checkpointing, keep_logits))


def available_bytes(device: torch.device) -> int:
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def pending_bytes(forward_model: torch.nn.Module, trainable: list, optimizer, compute_dtype: torch.dtype,
                  training: bool) -> int:
    """Bytes the pass allocates besides activations: under autocast (`compute_dtype` other
    than float32) a copy of every float32 weight matrix of `forward_model` (cast once, kept for
    the backward); in training, each trainable parameter's missing gradient and, before its
    first step, AdamW's two moments."""
    total = 0
    if compute_dtype != torch.float32:
        size = torch.tensor([], dtype=compute_dtype).element_size()
        total += sum(p.numel() * size for p in set(forward_model.parameters())
                     if p.dtype == torch.float32 and p.dim() >= 2)
    if training:
        for p in trainable:
            total += p.numel() * p.element_size() * ((p.grad is None) + 2 * (p not in optimizer.state))
    return total


class TokenBudget:
    """One worker's derived token budget, measured and logged at its first use."""

    def __init__(self, role: str, device: torch.device, shape: ModelShape, compute_dtype: torch.dtype,
                 pending: Callable[[], int], *, training: bool, checkpointing: bool, chunk_size: int,
                 keep_logits: bool):
        """pending(): the worker's `pending_bytes`; training: the worker updates its weights."""
        self.role, self.device, self.shape, self.pending, self.training = role, device, shape, pending, training
        self.act_bytes = torch.tensor([], dtype=compute_dtype).element_size()
        self.checkpointing, self.chunk_size, self.keep_logits = checkpointing, chunk_size, keep_logits
        self.tokens: Optional[int] = None

    @classmethod
    def maybe(cls, role: str, device: torch.device, micro: MicroBatching, adapt: bool, hf_config,
              pending: Callable[[], int], *, training: bool, lm_head: bool, compute_dtype: torch.dtype,
              checkpointing: bool, chunk_size: int, keep_logits: bool = False) -> Optional["TokenBudget"]:
        """A budget where the defaults leave micro-batching to memory: CUDA, no
        training.max_tokens_per_micro_batch, and `adapt` (not on data-parallel ranks, which
        must cut their shares into equally many micro-batches)."""
        if device.type != "cuda" or micro.max_tokens or not adapt:
            return None
        return cls(role, device, ModelShape.of(hf_config, lm_head), compute_dtype, pending, training=training,
                   checkpointing=checkpointing, chunk_size=chunk_size, keep_logits=keep_logits)

    def apply(self, micro: MicroBatching) -> MicroBatching:
        """`micro` with the budget, derived (and logged) at the first call. A budget already in
        `micro` (halved after an out-of-memory error) is kept."""
        if micro.max_tokens:
            return micro
        if self.tokens is None:
            self.tokens, available, pending = self.estimate()
            print(f"verl: {self.role} micro-batches of up to {self.tokens} tokens ({available / 2**30:.1f} GiB "
                  f"available, {pending / 2**30:.1f} GiB still to allocate; "
                  "training.max_tokens_per_micro_batch sets it)", flush=True)
        return dataclasses.replace(micro, max_tokens=self.tokens)

    def estimate(self) -> tuple[int, int, int]:
        """(tokens, available bytes, pending bytes) from the memory free now; nothing is kept
        (`verl.trainer.sleep_policy` asks before the budget is derived)."""
        available, pending = available_bytes(self.device), self.pending()
        tokens = token_budget(available, pending, self.shape, self.act_bytes, training=self.training,
                              checkpointing=self.checkpointing, chunk_size=self.chunk_size,
                              keep_logits=self.keep_logits)
        return tokens, available, pending
