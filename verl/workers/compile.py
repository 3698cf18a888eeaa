"""`model.torch_compile`: torch.compile the decoder layers for the training forward/backward.

A transformers decoder layer in bf16 autocast over float32 weights runs a dozen small
memory-bound kernels around its matmuls (RMSNorm in float32, casts, rotary embedding,
SiLU * up, residual adds); on an H100/H200 they cost about as much time as the matmuls of a
1-2B model. Inductor fuses them. Only the layers are compiled (the attention kernel itself
stays eager: `verl.workers.packing` or SDPA), with dynamic shapes so packed rows of any
length reuse one graph, and only inside `active()`: generation with the same module
(`rollout.name: hf`) keeps the eager layers. The plain path is the flag off.

With `model.enable_gradient_checkpointing` the backward recomputes each layer's forward, so the
backward must run inside `active()` too: a recompute through the eager layer returns tensors of
other shapes than the compiled forward saved, and torch.utils.checkpoint stops the update
(the actor holds the whole update inside it; `active()` nests).
"""

from __future__ import annotations

import contextlib
import logging

import torch

from verl.models.vision import is_vision_name

logger = logging.getLogger(__name__)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a transformers causal LM or base model (any wrapper); a vision-language
    model's language-model layers (its vision tower's blocks are skipped)."""
    for module_name, module in model.named_modules():
        if is_vision_name(module_name):  # a VL model's vision blocks come first in module order
            continue
        for name in ("layers", "h", "layer", "blocks"):
            seq = getattr(module, name, None)
            if isinstance(seq, torch.nn.ModuleList) and len(seq) > 0:
                return list(seq)
    return []


def note_compiled_peft_layers(model: torch.nn.Module) -> int:
    """Log, once, how many LoRA layers run peft's own forward inside the compiled layers (an MoE model's
    experts, a dropout): compiled peft layers ended a 7B LoRA update on an H100 with a policy loss 17% off
    eager's (docs/performance.md#the-7b-lora-update); only model.lora.fused's layers were measured equal.
    Returns the count."""
    from verl.models.lora_fused import unfused_lora_layers

    count = unfused_lora_layers(model)
    if count:
        logger.warning("model.torch_compile: %d LoRA layers run peft's own forward inside the compiled layers "
                       "(an MoE model's experts, or model.lora.dropout > 0), a path that disagreed with eager on "
                       "a GPU; set model.torch_compile=false to keep them eager", count)
    return count


class CompiledLayers:
    def __init__(self, model: torch.nn.Module, enabled: bool):
        self.layers = decoder_layers(model) if enabled else []
        self.enabled = bool(self.layers)
        self._compiled: dict[int, object] = {}
        self._depth = 0  # nested active() blocks: the layers go back to eager when the outermost ends
        if enabled and not self.layers:
            logger.warning("model.torch_compile: no decoder layers found; running eager")
        if self.enabled:
            # verl's packed attention is registered with torch.compiler.disable (packing.py):
            # the kernel call stays out of the graph, the layer is compiled around it.
            dyn = torch._dynamo.config
            dyn.cache_size_limit = max(getattr(dyn, "cache_size_limit", 8), 8 * len(self.layers))
            if hasattr(dyn, "recompile_limit"):
                dyn.recompile_limit = max(dyn.recompile_limit, 8 * len(self.layers))

    def _fn(self, layer):
        fn = self._compiled.get(id(layer))
        if fn is None:
            fn = self._compiled[id(layer)] = torch.compile(type(layer).forward.__get__(layer), dynamic=True)
        return fn

    @contextlib.contextmanager
    def active(self):
        """Compiled layer forwards inside the block; the class's eager forward outside."""
        if not self.enabled:
            yield
            return
        if self._depth == 0:
            for layer in self.layers:
                layer.forward = self._fn(layer)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                for layer in self.layers:
                    layer.__dict__.pop("forward", None)
