"""System and performance metrics: memory, GPU utilisation, model FLOPs utilisation (MFU).

Nothing here invents a number: a metric that cannot be measured is left out.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Optional

GIB = 1024**3

# Dense (no sparsity) bf16 tensor-core peak FLOP/s, from the vendors' data sheets.
# Checked in order: the first name fragment found in the device name wins.
# A None entry marks a known name whose peak we do not list (better no MFU than a wrong one).
PEAK_BF16_FLOPS: tuple[tuple[str, Optional[float]], ...] = (
    ("H100 PCIE", 756e12),
    ("H100 NVL", 835e12),
    ("H200", 989e12),
    ("H100", 989e12),  # SXM
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("A10G", None),  # AWS variant with its own clocks; no published tensor peak
    ("A10", 125e12),
    ("L4", 121e12),
)


def gpu_peak_flops(device_name: Optional[str]) -> Optional[float]:
    """Peak dense bf16 FLOP/s for a GPU name (e.g. torch.cuda.get_device_name()), None if unknown."""
    if not device_name:
        return None
    name = device_name.upper()
    for fragment, flops in PEAK_BF16_FLOPS:
        if fragment in name:
            return flops
    return None


def compute_mfu(flops: float, seconds: float, peak_flops: Optional[float]) -> Optional[float]:
    """Model FLOPs utilisation of a training phase, in [0, 1]:

        MFU = flops / (seconds * peak_flops)

    `flops`: what the phase computes, for the actor update verl.tracking.flops.update_flops (forward,
    activation gradients, the trained weights' gradients, attention). Count only the time spent in that
    phase (e.g. timing_s/update_actor), not generation. None when the peak is unknown or the time is
    not positive."""
    if peak_flops is None or peak_flops <= 0 or seconds <= 0:
        return None
    return flops / (seconds * peak_flops)


def _nvml_available() -> bool:
    try:
        import pynvml  # noqa: F401  (torch.cuda.utilization reads NVML through it)
    except ImportError:
        return False
    return True


def gpu_utilization(device=None) -> Optional[float]:
    """Percent of the last NVML sample period (1/6 s to 1 s) a kernel ran; None without NVML."""
    import torch

    if not torch.cuda.is_available() or not _nvml_available():
        return None
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # NVML present but unusable (driver mismatch, no permission)
        return None


class GpuUtilSampler:
    """Averages GPU utilisation over a step by polling in a background thread.

    One NVML reading at log time is biased low (the GPU idles while the trainer logs);
    the mean of readings taken every `interval_s` through the step is what nvidia-smi
    users expect to see. `read` is injectable for tests. With `read_memory` (bytes in use on
    the device, or None) and `on_memory`, each poll also hands a memory reading to `on_memory`
    (the trainer's StageMemory.observe_device: per-stage peaks of device memory).
    """

    def __init__(self, interval_s: float = 0.5, read: Optional[Callable[[], Optional[float]]] = None,
                 read_memory: Optional[Callable[[], Optional[int]]] = None,
                 on_memory: Optional[Callable[[int], None]] = None):
        self.interval_s = interval_s
        self.read = read or gpu_utilization
        self.read_memory, self.on_memory = read_memory, on_memory
        self._values: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "GpuUtilSampler":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpu-util-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            value = self.read()
            if value is not None:
                with self._lock:
                    self._values.append(value)
            if self.read_memory is not None and self.on_memory is not None:
                used = self.read_memory()
                if used is not None:
                    self.on_memory(used)
            self._stop.wait(self.interval_s)

    def mean_and_reset(self) -> Optional[float]:
        with self._lock:
            values, self._values = self._values, []
        return sum(values) / len(values) if values else None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def system_metrics(device=None, util_sampler: Optional[GpuUtilSampler] = None,
                   step_peak_bytes: Optional[int] = None) -> dict[str, float]:
    """Memory and utilisation now, under the canonical `system/*` names.

    system/cpu_memory_gb     resident memory of this process (GiB, psutil)
    system/gpu_memory_gb     device memory in use, all processes, as nvidia-smi shows it (GiB)
    system/gpu_memory_frac   the same as a fraction of the device's memory (seed: keep 0.70-0.85)
    system/gpu_memory_peak_gb  peak memory torch allocated in this process: since the last reset of
                             torch's peak counter, or over the step where `step_peak_bytes` (the
                             trainer's per-stage peaks, which reset that counter) is larger
    system/gpu_utilization   percent; averaged by `util_sampler` when given, else one NVML reading;
                             left out without pynvml

    GPU keys appear only once this process has initialised CUDA (reading them must not
    create a CUDA context in a CPU-only run).
    """
    out: dict[str, float] = {}
    try:
        import psutil

        out["system/cpu_memory_gb"] = psutil.Process(os.getpid()).memory_info().rss / GIB
    except ImportError:
        pass
    import torch

    # A CPU run on a GPU machine may still have initialised CUDA: read the GPU only for a CUDA device.
    on_gpu = torch.device(device).type == "cuda" if device is not None else True
    if on_gpu and torch.cuda.is_available() and torch.cuda.is_initialized():
        free, total = torch.cuda.mem_get_info(device)
        out["system/gpu_memory_gb"] = (total - free) / GIB
        out["system/gpu_memory_frac"] = (total - free) / total
        out["system/gpu_memory_peak_gb"] = max(torch.cuda.max_memory_allocated(device), step_peak_bytes or 0) / GIB
        util = util_sampler.mean_and_reset() if util_sampler is not None else None
        if util is None:
            util = gpu_utilization(device)
        if util is not None:
            out["system/gpu_utilization"] = util
    return out
