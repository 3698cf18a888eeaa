"""`model.mixed_precision: param_copy`: forward and backward on a `model.dtype` copy of the
parameters, with float32 master weights and optimizer state.

The default, `autocast`, keeps float32 parameters and casts every weight to bf16 at every
matmul of every micro-batch; everything between the matmuls (the residual stream, RMSNorm,
rotary embedding) runs in float32. This mode is what FSDP's
`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` and DeepSpeed's bf16 do (and
what verl's sharded workers already do):

    copy = master.to(bf16)                 on first use, then again after each optimizer step
                                           (only the tensors that changed; copy_ casts in place)
    loss(copy).backward()                  bf16 activations and residual stream, no weight casts
    master.grad += copy.grad  (float32)    as each copy gradient is accumulated (a hook), so
                                           micro-batches sum in float32; the bf16 one is freed
    optimizer.step() on master             float32, unchanged

Each micro-batch's weight gradient is rounded to bf16 once, exactly as the bf16 matmul of
autocast rounds it; the forward differs from autocast by the bf16 residual stream (the
numerics of vLLM and of a bf16 checkpoint). Buffers (rotary `inv_freq`) keep their dtype.
Cost: 2 bytes per parameter for the copy (its gradients live only until folded); saves
the float32 residual-stream activations and the per-micro-batch weight casts.

Staleness: `watch(optimizer)` marks the whole copy stale after every step of the master's
optimizer (the fused AdamW kernels write the parameters without bumping their version
counters); any other in-place write through autograd-visible ops (`load_state_dict`,
checkpoint loads, `p.add_()` under no_grad) bumps the written tensor's version counter, and
only those tensors are copied again. Writes through `p.data` are invisible to both: call
`invalidate()` after them.
"""

from __future__ import annotations

import copy

import torch


def cast_module_copy(model: torch.nn.Module, device: torch.device, dtype: torch.dtype,
                     trainable: bool) -> torch.nn.Module:
    """A deep copy whose floating parameters are created directly on `device` in `dtype`
    (never a second full-precision copy); buffers keep their dtype (a bf16 rotary
    `inv_freq` would shift positions by ~0.4 rad at token 2000). Tied parameters stay tied.
    trainable: keep each parameter's requires_grad, else freeze all."""
    memo = {}
    for p in model.parameters():
        if id(p) not in memo:
            data = p.detach().to(device=device, dtype=dtype if p.is_floating_point() else p.dtype, copy=True)
            memo[id(p)] = torch.nn.Parameter(data, requires_grad=trainable and p.requires_grad)
    for b in model.buffers():
        if id(b) not in memo:
            memo[id(b)] = b.detach().to(device=device, copy=True)
    return copy.deepcopy(model, memo)


class ParamCopy:
    """The compute copy of a float32 master model (see the module docstring)."""

    def __init__(self, master: torch.nn.Module, dtype: torch.dtype):
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"model.mixed_precision: param_copy needs model.dtype bfloat16 or float16, got {dtype}")
        self.master = master
        device = next(master.parameters()).device
        self.module = cast_module_copy(master, device, dtype, trainable=True)
        # (master, copy) per distinct parameter, in the master's order (tied ones once).
        self.pairs = list(zip(_unique(master.parameters()), _unique(self.module.parameters())))
        self._versions = [m._version for m, _ in self.pairs]
        self._stale = False
        for m, c in self.pairs:
            if c.requires_grad:
                c.register_post_accumulate_grad_hook(_folder(m))

    def watch(self, optimizer: torch.optim.Optimizer) -> None:
        """Mark the copy stale after every step of the master's optimizer."""
        optimizer.register_step_post_hook(lambda *_: self.invalidate())

    def invalidate(self) -> None:
        """The master changed in ways version counters do not show: copy everything next time."""
        self._stale = True

    def synced(self) -> torch.nn.Module:
        """The copy, with the master tensors written since the last call copied in (cast)
        and the master's train/eval mode."""
        master_params = _unique(self.master.parameters())
        if len(master_params) != len(self.pairs) or any(a is not b for a, (b, _) in zip(master_params, self.pairs)):
            raise RuntimeError("model.mixed_precision: param_copy: the actor's parameters were replaced "
                               "(not written in place); rebuild the Actor")
        with torch.no_grad():
            for i, (m, c) in enumerate(self.pairs):
                if self._stale or m._version != self._versions[i]:
                    c.copy_(m)
                    self._versions[i] = m._version
        self._stale = False
        if self.module.training != self.master.training:
            self.module.train(self.master.training)
        return self.module


def _unique(params) -> list:
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _folder(master: torch.nn.Parameter):
    """Post-accumulate-grad hook of a copy parameter: its gradient joins the master's in
    float32 and is freed."""
    def fold(copy_param: torch.Tensor) -> None:
        g = copy_param.grad
        if g is None:
            return
        with torch.no_grad():
            if master.grad is None:
                master.grad = g.to(master.dtype)
            else:
                master.grad.add_(g)
        copy_param.grad = None
    return fold
