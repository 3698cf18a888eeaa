"""CPU offload while a component is idle: optimizer state and whole models.

One GPU holds, in turn, the generation engine (KV cache), the actor's forward/backward,
the reference and the critic. What is not in use can wait in host memory:

    training.offload_optimizer    AdamW moments (8 bytes/parameter in float32) live on the CPU
                                  between updates and come back only for the update
    training.offload_idle_models  reference and critic (weights, and the critic's optimizer
                                  state) live on the CPU except while they compute

Copies go through pinned host buffers, allocated once and reused. On a CPU-only run both
are no-ops. `nn.Module.to` moves parameters in place, so optimizers keep their references.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch


def _pinned_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=torch.cuda.is_available())


class OptimizerOffload:
    """Moves an optimizer's state tensors to host memory and back, in place in `state`."""

    def __init__(self, optimizer: torch.optim.Optimizer, enabled: bool = True):
        self.optimizer = optimizer
        self.enabled = enabled
        self._host: dict[tuple[int, str], torch.Tensor] = {}
        self._device: dict[tuple[int, str], torch.device] = {}
        self.on_host = False

    def _items(self):
        for p, state in self.optimizer.state.items():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    yield (id(p), key), state, key, value

    def offload(self) -> int:
        """State to host memory; returns bytes moved."""
        if not self.enabled or self.on_host:
            return 0
        moved = 0
        for k, state, key, value in self._items():
            if value.device.type == "cpu":
                continue
            self._device[k] = value.device
            host = self._host.get(k)
            if host is None or host.shape != value.shape or host.dtype != value.dtype:
                host = self._host[k] = _pinned_like(value)
            host.copy_(value, non_blocking=True)
            state[key] = host
            moved += value.numel() * value.element_size()
        if moved and torch.cuda.is_available():
            torch.cuda.synchronize()  # host buffers complete before the device memory is reused
        self.on_host = True
        return moved

    def load(self) -> int:
        """State back to where it was (the parameters' device); returns bytes moved."""
        if not self.enabled or not self.on_host:
            return 0
        moved = 0
        for k, state, key, value in self._items():
            device = self._device.get(k)
            if device is None or value.device == device:
                continue
            state[key] = value.to(device, non_blocking=True)
            moved += value.numel() * value.element_size()
        self.on_host = False
        return moved


class IdleOffload:
    """Keeps a model (and optionally its optimizer state) on the CPU except inside `active()`."""

    def __init__(self, model: torch.nn.Module, device: torch.device, enabled: bool,
                 optimizer: Optional[torch.optim.Optimizer] = None):
        self.model = model
        self.device = device
        self.enabled = enabled and device.type != "cpu"
        self.opt = OptimizerOffload(optimizer, self.enabled) if optimizer is not None else None
        if self.enabled:
            self.model.to("cpu")

    @contextlib.contextmanager
    def active(self):
        if not self.enabled:
            yield
            return
        self.model.to(self.device)
        if self.opt is not None:
            self.opt.load()
        try:
            yield
        finally:
            if self.opt is not None:
                self.opt.offload()
            self.model.to("cpu")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
