"""The actor's weights under their Hugging Face checkpoint names, LoRA merged: what a
generation engine (the vLLM engine, the HF backend's weight copy, a merged save) is fed.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional

import torch

from verl.models.lora import base_model, merged_state_items
from verl.models.moe import is_moe


def _conversions(model) -> bool:
    """Whether transformers keeps `model` in memory in another layout than its checkpoint's (an MoE model's
    experts fused in one tensor each), which save_pretrained reverts."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
    except ImportError:  # an older transformers: memory and checkpoint layouts are one
        return False
    return bool(getattr(model, "_weight_conversions", None) or get_model_conversion_mapping(model, add_legacy=False))


def _checkpoint_layout(model, name: str, value: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, value) as save_pretrained writes it: transformers' own reverse conversion, one parameter at a
    time (an MoE layer's fused experts become one tensor per expert and projection, slices of this one)."""
    from transformers.core_model_loading import revert_weight_conversion

    yield from revert_weight_conversion(model, {name: value}).items()


def hf_named_weights(model: torch.nn.Module, skip: Optional[Callable[[str], bool]] = None,
                     checkpoint_layout: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, tensor) for every parameter and persistent buffer of a causal LM (or of a
    vision-language model: `model.visual.*`, `model.language_model.*`, ... as transformers 5 saves them,
    the vision tower included), less the names `skip` is true for (a frozen vision tower,
    verl.rollout.in_process).

    Names are the model's `state_dict` names, in the layout `save_pretrained` writes and engines load
    (`checkpoint_layout`): an MoE model's experts, one fused tensor per layer in transformers 5's memory,
    go as one tensor per expert and projection (`mlp.experts.3.gate_proj.weight`, Mixtral's
    `block_sparse_moe.experts.3.w1.weight`), converted one parameter at a time; checkpoint_layout=False keeps
    the memory layout (a copy of the same model class, the HF backend's). Tied parameters appear once. For a peft model the LoRA deltas are merged on the fly
    (W + scale * B @ A, the adapters themselves are left untouched) and peft's name
    decorations (`base_layer`, `modules_to_save.<adapter>`) are removed.
    """
    base = base_model(model)
    convert = checkpoint_layout and is_moe(base) and _conversions(base)  # fused experts; VL names stay as they are
    for name, value in merged_state_items(model, skip=skip):
        if convert:
            yield from _checkpoint_layout(base, name, value)
        else:
            yield name, value


# Bytes per load call of a weight sync (vLLM's direct reload, SGLang's update_weights_from_tensor):
# bounds one message, and what a lazy stream of merged LoRA weights holds at once (1 GiB, against
# 61 GiB for a whole 32B model in bf16).
SYNC_BUCKET_BYTES = 1 << 30


def weight_buckets(weights: Iterable[tuple[str, torch.Tensor]], limit: int) -> Iterator[list]:
    """(name, tensor) pairs cut into consecutive lists of at most `limit` bytes (a larger tensor
    alone), drawn lazily: fed by `hf_named_weights`, whose LoRA merges are new tensors (W + B A), at
    most one bucket of them exists at a time instead of a second copy of the whole model (a 32B
    LoRA run ran out of memory on the H200 building that copy for its first sync)."""
    current, size = [], 0
    for name, tensor in weights:
        n = tensor.numel() * tensor.element_size()
        if current and size + n > limit:
            yield current
            current, size = [], 0
        current.append((name, tensor))
        size += n
    if current:
        yield current
