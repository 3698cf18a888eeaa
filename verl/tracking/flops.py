"""FLOPs of the actor update, for its model FLOPs utilisation: the trainer's perf/mfu and the benchmarks'
update floor (benchmarks/floor.py) both count with `update_flops_of`.

    shape = model_shape(actor.model)                         # once: what a token multiplies by
    flops = update_flops(shape, prompt_lens, response_lens)  # one forward + backward over these sequences
    mfu = compute_mfu(flops * epochs, seconds, peak)         # verl.tracking.system

Counted (model FLOPs: what the algorithm needs, not what the kernels happen to do, so padding and
activation recomputation under gradient checkpointing count zero). For sequences of s = p + r tokens
(p prompt, r response), with T = sum s and R = sum r:

    forward matmuls   F = 2 trunk T + 2 head R          the LM head runs on the response positions only
    attention         A = 2 width sum s (s + 1)          causal QK^T and AV, forward (width = layers x heads x d)
    full fine-tuning  3 F + 3 A                          forward, input gradients, weight gradients (6 N a token);
                                                         attention has no weights: its backward is twice its forward
    adapters (LoRA)   2 F + 3 A + 6 adapters T           the frozen base: forward and input gradients only; each
                                                         adapter's thin matmuls forward, input and weight gradients

trunk: the decoder layers' matmul weights; head: the LM head's (the input embedding is a lookup, not a
matmul); adapters: the trainable LoRA weights. 6 N a token would overstate a LoRA update's utilisation by
about 1.5x. A mixture-of-experts model's token multiplies by its k of E experts only: the fused expert
tensors count k / E of their size in the trunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class UpdateShape:
    trunk_params: int  # the decoder layers' matmul weights (frozen base and adapters alike)
    head_params: int  # the LM head's
    adapter_params: int  # trained adapters (LoRA); 0 for full fine-tuning
    attention_width: int  # layers x heads x head_dim of the queries


def update_flops_of(trunk: int, head: int, adapters: int, attention_width: int, prompt_lens: Sequence[int],
                    response_lens: Sequence[int]) -> float:
    """FLOPs of one forward and backward pass (module docstring); adapters 0: full fine-tuning."""
    lengths = [int(p) + int(r) for p, r in zip(prompt_lens, response_lens, strict=True)]
    tokens, responses = sum(lengths), sum(int(r) for r in response_lens)
    forward = 2.0 * trunk * tokens + 2.0 * head * responses
    attention = sum(2.0 * attention_width * s * (s + 1) for s in lengths)
    if not adapters:
        return 3.0 * forward + 3.0 * attention
    return 2.0 * forward + 3.0 * attention + 6.0 * adapters * tokens


def update_flops(shape: UpdateShape, prompt_lens: Sequence[int], response_lens: Sequence[int]) -> float:
    return update_flops_of(shape.trunk_params, shape.head_params, shape.adapter_params, shape.attention_width,
                           prompt_lens, response_lens)


def model_shape(model) -> UpdateShape:
    """The shape of a Hugging Face causal LM (peft-wrapped or not) for `update_flops`. Full fine-tuning:
    every weight but the input embedding's lookup; LoRA: the trainable weights are the adapters."""
    params = list({id(p): p for p in model.parameters()}.values())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    embed = _weight(model, "get_input_embeddings")
    head = _weight(model, "get_output_embeddings")
    head_n = head.numel() if head is not None else 0
    tied = embed is not None and head is embed
    trunk = total - head_n - (0 if tied or embed is None else embed.numel())
    adapters = 0 if trainable >= trunk else trainable  # a frozen base: only the adapters train
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg  # vision-language models keep the decoder's in text_config
    trunk -= _inactive_expert_params(params, cfg)
    layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    heads = int(getattr(cfg, "num_attention_heads", 0) or 0)
    hidden = int(getattr(cfg, "hidden_size", 0) or 0)
    head_dim = getattr(cfg, "head_dim", None) or (hidden // heads if heads else 0)
    return UpdateShape(trunk - adapters if adapters else trunk, head_n, adapters, layers * heads * int(head_dim))


def _weight(model, getter: str) -> Optional[object]:
    module = getattr(model, getter)() if hasattr(model, getter) else None
    return getattr(module, "weight", None)


def _inactive_expert_params(params: list, cfg) -> int:
    """The weights of the experts a token does not use: (1 - k / E) of the fused expert tensors (3-D
    parameters, (E, in, out)) of a mixture-of-experts model; 0 for a dense one."""
    experts = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    top_k = getattr(cfg, "num_experts_per_tok", None)
    if not experts or not top_k:
        return 0
    fused = sum(p.numel() for p in params if p.dim() == 3 and p.shape[0] == experts)
    return int(fused * (1 - top_k / experts))
