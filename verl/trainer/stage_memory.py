"""Peak GPU memory per stage of the step, measured beside the stage timer (verl/trainer/timer.py).

    memory_gb/<stage>          the most memory torch's allocator held in this process while the
                               stage ran, nested stages included (torch.cuda.max_memory_allocated,
                               its peak counter reset at every stage boundary), less the bytes it
                               counts with no device memory behind them: an in-process vLLM engine's
                               pool while sleep mode has released it (its tensors stay allocated in
                               torch's books; on 2026-12-02 the raw counter read 159 GiB in a 7B LoRA
                               update on a 141 GiB H200, NVML 140 GiB for all processes)
    memory_gb/step             the largest of these: the step's peak
    memory_gb/device/<stage>   device memory in use by all processes (NVML, what nvidia-smi shows),
                               the largest reading while the stage ran: one at its end, and the GPU
                               sampler's (every 0.5 s, verl/tracking/system.py) in between. An engine
                               in another process (SGLang's scheduler) counts here, not above; so
                               does vLLM's memory pool under sleep mode (its own allocator)
    memory/alloc_retries/<stage>  how often torch's caching allocator found no room for a request and
                               freed its cached blocks to retry (torch.cuda.memory_stats
                               num_alloc_retries, nested stages included; only stages with a retry are
                               logged). Each retry synchronizes the device and re-allocates: a stage
                               with retries every step runs near the memory limit and pays for it in
                               time; a smaller training.max_tokens_per_micro_batch avoids it

Unbacked bytes (`CudaCounters.unbacked`, the rollout engine's `unbacked_bytes()`) change only where the
engine sleeps or wakes. Each reading of the peak covers the span since the counter's last reset and
subtracts the smaller of the unbacked bytes at that reset and now: exact when the span holds at most
one sleep or wake (the engine sleeps between stages and wakes inside update_weights or rollout), and
never below the true figure when the pool was released only part of the span.

Nested stages: entering one folds the parent's peak so far into the parent and resets the counter;
leaving it folds its own peak into the parent and resets again, so each figure covers its stage's
whole span. Read only for a CUDA device once CUDA is initialised (a CPU run reads nothing), and in
the thread the timer times (the asynchronous producer's generation overlaps the trainer's stages:
its allocations land in whichever stage runs then).
"""

from __future__ import annotations

import threading
from typing import Optional

import torch

GIB = 1024**3


class CudaCounters:
    """The counters StageMemory reads, for one CUDA device (tests pass a stand-in).
    unbacked: () -> bytes torch counts as allocated in this process with no device memory behind
    them now (the trainer passes its rollout engine's `unbacked_bytes`); None: there are none."""

    def __init__(self, device, unbacked=None):
        self.device = device
        self._unbacked = unbacked

    def active(self) -> bool:
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def unbacked(self) -> int:
        return int(self._unbacked()) if self._unbacked is not None else 0

    def alloc_retries(self) -> int:
        """The caching allocator's retries so far in this process (cudaMalloc failed, cache freed, retried)."""
        return int(torch.cuda.memory_stats(self.device).get("num_alloc_retries", 0))

    def device_used(self) -> Optional[int]:
        """Bytes in use on the device by all processes; None without NVML (pynvml): left out."""
        try:
            return int(torch.cuda.device_memory_used(self.device))
        except Exception:
            return None


class StageMemory:
    def __init__(self, counters=None):
        self.counters = counters
        self.peaks: dict[str, int] = {}  # bytes, per stage
        self.device_peaks: dict[str, int] = {}
        self.retries: dict[str, int] = {}  # allocator retries per stage, nested stages included
        self._open: list[list] = []  # [stage, its peak so far (None: not measured), retries at entry]
        self._lock = threading.Lock()  # the sampler thread reads the open stages
        self._unbacked_at_reset = 0  # counters.unbacked() when the peak counter was last reset

    def _active(self) -> bool:
        return self.counters is not None and self.counters.active()

    def reset(self) -> None:
        with self._lock:
            self.peaks, self.device_peaks, self.retries, self._open = {}, {}, {}, []

    def _reset_peak(self) -> None:
        self.counters.reset_peak()
        self._unbacked_at_reset = self.counters.unbacked()

    def _peak(self) -> int:
        """Bytes: torch's peak since the last reset, less what it counted without device memory all that
        span (the module docstring says why the smaller of the two readings)."""
        return self.counters.peak() - min(self._unbacked_at_reset, self.counters.unbacked())

    def enter(self, stage: str) -> None:
        running = retries = None
        if self._active():
            if self._open and self._open[-1][1] is not None:
                self._open[-1][1] = max(self._open[-1][1], self._peak())
            self._reset_peak()
            running, retries = 0, self.counters.alloc_retries()
        with self._lock:
            self._open.append([stage, running, retries])

    def exit(self) -> None:
        with self._lock:
            stage, running, retries = self._open.pop()
        if not self._active():
            return
        peak = max(running or 0, self._peak())  # CUDA may have started inside the stage
        self.peaks[stage] = max(self.peaks.get(stage, 0), peak)
        retried = self.counters.alloc_retries() - (retries or 0)  # (None: CUDA started inside the stage)
        if retried:
            self.retries[stage] = self.retries.get(stage, 0) + retried
        if self._open:
            self._open[-1][1] = max(self._open[-1][1] or 0, peak)
        self._reset_peak()
        used = self.counters.device_used()
        if used is not None:
            self._observe([stage] + [entry[0] for entry in self._open], used)

    def observe_device(self, used: int) -> None:
        """A device-memory reading from another thread (the GPU sampler): it counts for every
        stage open now; between stages it counts for none."""
        with self._lock:
            names = [entry[0] for entry in self._open]
        self._observe(names, used)

    def _observe(self, names: list, used: int) -> None:
        with self._lock:
            for name in names:
                self.device_peaks[name] = max(self.device_peaks.get(name, 0), used)

    def step_peak(self) -> Optional[int]:
        return max(self.peaks.values()) if self.peaks else None

    def metrics(self) -> dict[str, float]:
        out = {f"memory_gb/{k}": v / GIB for k, v in self.peaks.items()}
        out.update({f"memory/alloc_retries/{k}": float(v) for k, v in self.retries.items()})
        if self.peaks:
            out["memory_gb/step"] = self.step_peak() / GIB
        with self._lock:
            out.update({f"memory_gb/device/{k}": v / GIB for k, v in self.device_peaks.items()})
        return out
