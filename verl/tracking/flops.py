"""FLOPs of the actor update, for its model FLOPs utilisation (perf/mfu).

    shape = model_shape(actor.model)                 # once: what a token multiplies by
    flops = update_flops(shape, [412, 530, ...])      # one forward + backward over these sequences
    mfu = compute_mfu(flops * epochs, seconds, peak)  # verl.tracking.system

Counted (model FLOPs: what the algorithm needs, not what the kernels happen to do, so activation
recomputation under gradient checkpointing is not counted):

    linear layers, per token:  2 N (forward) + 2 N (gradients of the activations) + 2 N_train (weight gradients)
    attention, per layer, per sequence of length L (causal, queries of width d = heads x head_dim):
                               forward QK^T and AV over L^2 / 2 pairs: 2 x 2 d L^2 / 2 = 2 d L^2
                               backward twice the forward (dQ, dK, dV, dP):           4 d L^2

N: the weights each token multiplies by (every linear layer and the LM head; the input embedding is a
lookup, not a matmul, unless it is the tied LM head). N_train: those the update trains. Full
fine-tuning: N_train = N, the classic 6 N per token (Kaplan et al. 2020, PaLM appendix B). LoRA: the
frozen base still needs its activation gradients (4 N) and only the adapters' weight gradients
(2 N_lora), which is why 6 N would overstate a LoRA update's utilisation by about 1.5x.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ModelShape:
    matmul_params: int  # N
    trainable_matmul_params: int  # N_train
    layers: int
    attention_width: int  # d: heads x head_dim of the queries


def model_shape(model) -> ModelShape:
    """The shape of a Hugging Face causal LM (peft-wrapped or not) for `update_flops`."""
    params = {id(p): p for p in model.parameters()}.values()
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    embed_w = getattr(embed, "weight", None)
    tied = embed_w is not None and head is not None and getattr(head, "weight", None) is embed_w
    if embed_w is not None and not tied:
        total -= embed_w.numel()
        if embed_w.requires_grad:
            trainable -= embed_w.numel()
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg  # vision-language models keep the decoder's in text_config
    layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    heads = int(getattr(cfg, "num_attention_heads", 0) or 0)
    hidden = int(getattr(cfg, "hidden_size", 0) or 0)
    head_dim = getattr(cfg, "head_dim", None) or (hidden // heads if heads else 0)
    return ModelShape(total, trainable, layers, int(heads * head_dim))


def update_flops(shape: ModelShape, seq_lengths: Iterable[int]) -> float:
    """FLOPs of one forward and backward pass over sequences of these lengths (module docstring)."""
    lengths = [int(n) for n in seq_lengths]
    tokens = sum(lengths)
    linear = (4 * shape.matmul_params + 2 * shape.trainable_matmul_params) * tokens
    attention = 6 * shape.layers * shape.attention_width * sum(n * n for n in lengths)
    return float(linear + attention)
