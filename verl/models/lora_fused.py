"""Fused LoRA linear layers (`model.lora.fused`): fewer passes over the activations than peft's forward.

A LoRA linear layer computes, for x of shape (N, in), the frozen base W (out, in) with bias b, the adapters
A (r, in) and B (out, r) and the scale s = alpha / r:

    y = x W^T + b + s (x A^T) B^T

peft computes it as written, one kernel a term: x cast to the adapters' float32 (then back to bf16 by
autocast), x A^T, (.) B^T, times s, plus the base output, cast back. Each of these reads or writes an (N, in)
or (N, out) tensor: for a 7B model's k/v projections (out 512) they move more bytes than the base matmul
does FLOPs at the card's ratio. Here, in the compute dtype (the base weight's, or autocast's):

    forward    t = x A^T                      (N, r)
               c = b + t (s B)^T              (N, out)   one GEMM, the bias as its C input
               y = c + x W^T                  (N, out)   one GEMM, c as its C input (cuBLAS beta = 1)
    backward   g = dy (s B)                   (N, r)
               dx = g A + dy W                (N, in)    one GEMM with g A as its C input
               dA = g^T x,  d(sB) = dy^T t    the adapters' gradients (autograd folds s and the casts back
                                              into the float32 adapters)

It saves x (the tensor the layer was given, no copy) and t (N x r) for the backward, where peft's path also
keeps a bf16 copy of x for lora_A's weight gradient.

Only vanilla LoRA on an nn.Linear base takes this path: one active adapter, no dropout, not merged, adapters
enabled, a frozen base weight, no per-call adapter_names. Any other call goes through peft's own forward, so
`adapters_disabled` (the reference policy), merging for the weight sync and saving are untouched. Written by
hand because peft has no fused path for this and torch.compile, by default, calls cuBLAS for the matmuls
without folding the additions into them.
"""

from __future__ import annotations

import types
from typing import Optional

import torch


class _LoraLinearFn(torch.autograd.Function):
    """y = x W^T + b + t Bs^T with t = x A^T, for 2-D x in one dtype (module docstring). W and b frozen."""

    @staticmethod
    def forward(ctx, x, weight, bias, a, b_scaled):
        t = x @ a.t()
        c = torch.addmm(bias, t, b_scaled.t()) if bias is not None else t @ b_scaled.t()
        y = torch.addmm(c, x, weight.t())
        ctx.save_for_backward(x, weight, a, b_scaled, t)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, a, b_scaled, t = ctx.saved_tensors
        g = dy @ b_scaled
        dx = torch.addmm(g @ a, dy, weight) if ctx.needs_input_grad[0] else None
        da = g.t() @ x if ctx.needs_input_grad[3] else None
        db = dy.t() @ t if ctx.needs_input_grad[4] else None
        return dx, None, None, da, db


def compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the layer computes in: autocast's where it is on for x's device, else the base weight's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return weight.dtype


def fused_lora_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], a: torch.Tensor,
                      b: torch.Tensor, scale: float) -> torch.Tensor:
    """x (..., in) -> (..., out) as the module docstring's formula, in compute_dtype(x, weight). The adapters
    a (r, in) and b (out, r) may be float32 masters: their casts (and s) are ordinary autograd ops."""
    dt = compute_dtype(x, weight)
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).to(dt)
    bias = bias.to(dt) if bias is not None else None
    with torch.autocast(x.device.type, enabled=False):  # the dtypes are chosen here
        y = _LoraLinearFn.apply(x2, weight.to(dt), bias, a.to(dt), (b * scale).to(dt))
    return y.reshape(*shape[:-1], y.shape[-1])


def _fusable_call(layer, kwargs) -> Optional[str]:
    """The one adapter name this call of peft LoRA Linear `layer` can run fused, or None."""
    if kwargs or layer.disable_adapters or layer.merged or getattr(layer, "fan_in_fan_out", False):
        return None
    active = [n for n in layer.active_adapters if n in layer.lora_A]
    if len(active) != 1 or active[0] in getattr(layer, "lora_variant", {}):
        return None
    name = active[0]
    base = layer.base_layer
    if type(base) is not torch.nn.Linear or base.weight.requires_grad:
        return None
    if not isinstance(layer.lora_dropout[name], torch.nn.Identity):  # dropout > 0 draws a mask on x
        return None
    return name


def _forward(self, x, *args, **kwargs):
    name = None if args else _fusable_call(self, kwargs)
    if name is None:
        return self._peft_forward(x, *args, **kwargs)
    return fused_lora_linear(x, self.base_layer.weight, self.base_layer.bias, self.lora_A[name].weight,
                             self.lora_B[name].weight, self.scaling[name])


def unfused_lora_layers(model: torch.nn.Module) -> int:
    """How many of `model`'s peft LoRA layers run peft's own forward in a training call: not routed by
    `fuse_lora_linears` (peft's ParamWrapper on an MoE model's experts, other layer types), or routed but
    refused by `_fusable_call` (a dropout > 0, DoRA, a trainable base)."""
    from peft.tuners.lora.layer import LoraLayer

    return sum(not hasattr(m, "_peft_forward") or _fusable_call(m, {}) is None
               for m in model.modules() if isinstance(m, LoraLayer))


def fuse_lora_linears(model: torch.nn.Module) -> int:
    """Route every peft LoRA Linear of `model` through the fused forward where a call allows it; returns how
    many layers were routed. The module's parameters, names and state dict stay peft's."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    count = 0
    for module in model.modules():
        if type(module) is LoraLinear and not hasattr(module, "_peft_forward"):
            module._peft_forward = module.forward
            module.forward = types.MethodType(_forward, module)
            count += 1
    return count
