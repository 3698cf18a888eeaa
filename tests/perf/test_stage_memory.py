"""Per-stage peak memory (verl/trainer/stage_memory.py) through the stage timer, with a stand-in
for CUDA's allocator counters: the figures below are derived by hand from the allocations each
stage makes."""

from __future__ import annotations

import threading
import time

import pytest

from verl.trainer.stage_memory import GIB, StageMemory
from verl.trainer.timer import StageTimer
from verl.tracking import GpuUtilSampler


class FakeCounters:
    """torch.cuda's allocator statistics in GiB units: `allocated` now, `peak` since the last reset
    (a reset sets the peak to what is allocated, as torch.cuda.reset_peak_memory_stats does)."""

    def __init__(self, active=True):
        self.is_active, self.allocated, self._peak, self.used, self.retried = active, 0, 0, None, 0
        self.unbacked_gib = 0  # of `allocated`: a sleeping engine's pool, still in torch's books

    def unbacked(self):
        return self.unbacked_gib * GIB

    def alloc(self, gib):
        self.allocated += gib * GIB
        self._peak = max(self._peak, self.allocated)

    def free(self, gib):
        self.allocated -= gib * GIB

    def active(self):
        return self.is_active

    def peak(self):
        return self._peak

    def reset_peak(self):
        self._peak = self.allocated

    def device_used(self):
        return self.used

    def alloc_retries(self):
        return self.retried


def test_nested_stages_each_keep_their_whole_span_peak():
    c = FakeCounters()
    timer = StageTimer(StageMemory(c))
    timer.reset()

    def inner():  # 5 held by the outer stage; inner goes up to 5 + 4 = 9
        c.alloc(4)
        c.free(4)

    def outer():  # 5 before the inner stage, 9 inside it, 5 + 2 = 7 after it
        c.alloc(5)
        timer("inner", inner)
        c.alloc(2)
        c.free(7)

    timer("outer", outer)

    def inner2():  # nothing held outside; up to 3
        c.alloc(3)
        c.free(3)

    def outer2():  # 6 before the inner stage (freed before it), 3 inside, 4 after
        c.alloc(6)
        c.free(6)
        timer("inner2", inner2)
        c.alloc(4)
        c.free(4)

    timer("outer2", outer2)
    m = timer.metrics()
    assert m["memory_gb/inner"] == 9 and m["memory_gb/outer"] == 9  # the outer span includes the inner peak
    assert m["memory_gb/inner2"] == 3 and m["memory_gb/outer2"] == 6  # 6 came before inner2 started
    assert m["memory_gb/step"] == 9
    assert set(m) >= {"timing_s/outer", "timing_s/inner", "timing_s/step"}  # the timing is unchanged
    timer.reset()
    assert not any(k.startswith("memory_gb/") for k in timer.metrics())  # a new step starts empty


def test_allocator_retries_count_for_their_stage_and_the_stages_around_it():
    c = FakeCounters()
    timer = StageTimer(StageMemory(c))
    timer.reset()
    c.retried = 7  # retries before the step: counted nowhere

    def retry(n):
        c.retried += n

    def update():  # 2 retries of its own, 3 in the nested stage -> 5 for the update
        retry(2)
        timer("inner", lambda: retry(3))

    timer("update", update)
    timer("update", lambda: retry(1))  # a second call adds: 6
    timer("rollout", lambda: None)  # none: not logged
    m = timer.metrics()
    assert m["memory/alloc_retries/update"] == 6 and m["memory/alloc_retries/inner"] == 3
    assert "memory/alloc_retries/rollout" not in m
    timer.reset()
    assert not any(k.startswith("memory/") for k in timer.metrics())


def test_a_stage_called_twice_keeps_its_larger_peak_and_held_memory_counts():
    c = FakeCounters()
    c.alloc(10)  # weights held across the step: in every stage's peak
    timer = StageTimer(StageMemory(c))
    timer.reset()
    for extra in (2, 5, 1):
        timer("update", lambda: (c.alloc(extra), c.free(extra)))
    assert timer.metrics()["memory_gb/update"] == 15  # 10 + 5


def test_device_memory_counts_for_every_open_stage_and_not_between_stages():
    c = FakeCounters()
    memory = StageMemory(c)
    timer = StageTimer(memory)
    timer.reset()
    c.used = 20 * GIB  # the reading each stage takes at its end

    def inner():
        memory.observe_device(50 * GIB)  # a sampler reading while both stages are open

    def outer():
        memory.observe_device(30 * GIB)
        timer("inner", inner)

    timer("outer", outer)
    memory.observe_device(99 * GIB)  # between stages: no stage's
    m = timer.metrics()
    assert m["memory_gb/device/outer"] == 50 and m["memory_gb/device/inner"] == 50
    c.used = None  # no NVML: no end-of-stage reading, sampler readings still count
    timer.reset()
    timer("rollout", lambda: memory.observe_device(7 * GIB))
    assert timer.metrics()["memory_gb/device/rollout"] == 7


def test_a_sleeping_engines_pool_is_not_counted_where_it_holds_no_memory():
    """The hybrid engine on one GPU: the actor holds 10 GiB, the in-process vLLM engine's pool 70 GiB.
    Sleep mode unmaps the pool between rollout and update, but its tensors stay allocated in torch's
    books (torch still counts 80), so the raw peak counter would charge the update 120 GiB."""
    c = FakeCounters()
    c.alloc(10)  # the actor
    c.alloc(70)  # the engine's pool, awake
    timer = StageTimer(StageMemory(c))
    timer.reset()

    def rollout():  # awake: 80 + 3 of generation buffers = 83, all of it on the device
        c.alloc(3)
        c.free(3)

    timer("rollout", rollout)
    c.unbacked_gib = 70  # engine.sleep(), between stages: the pool's 70 GiB unmapped, torch still counts 80

    def update():  # 80 + 40 = 120 in torch's books; on the device 10 + 40 = 50
        c.alloc(40)
        c.free(40)

    timer("update_actor", update)

    def sync():  # the wake-up inside the stage: the pool mapped again, then 1 GiB of reload buffers
        c.unbacked_gib = 0
        c.alloc(1)
        c.free(1)

    timer("update_weights", sync)  # 81, all of it on the device (unbacked 70 at entry, 0 at exit: 0 subtracted)

    def last_rollout_then_sleep():  # a stage the engine falls asleep in, after its 83 GiB peak
        c.alloc(3)
        c.free(3)
        c.unbacked_gib = 70

    timer("rollout_and_sleep", last_rollout_then_sleep)  # 0 at entry, 70 at exit: 0 subtracted, 83 kept
    m = timer.metrics()
    assert m["memory_gb/rollout"] == 83 and m["memory_gb/update_actor"] == 50
    assert m["memory_gb/update_weights"] == 81 and m["memory_gb/rollout_and_sleep"] == 83
    assert m["memory_gb/step"] == 83  # not 120


def test_unbacked_bytes_inside_a_nested_stage_fold_into_its_parent():
    """update_actor (asleep all along, 70 unbacked of the 80 held) with a nested micro-batch stage: 80 + 5
    before it, 80 + 5 + 20 inside it, 80 + 2 after: the device saw 10 + 5 + 20 = 35 at most."""
    c = FakeCounters()
    c.alloc(80)
    c.unbacked_gib = 70
    timer = StageTimer(StageMemory(c))
    timer.reset()

    def micro():
        c.alloc(20)
        c.free(20)

    def update():
        c.alloc(5)
        timer("micro", micro)
        c.free(5)
        c.alloc(2)
        c.free(2)

    timer("update_actor", update)
    m = timer.metrics()
    assert m["memory_gb/micro"] == 35 and m["memory_gb/update_actor"] == 35


def test_cuda_counters_read_the_unbacked_bytes_they_are_given():
    from verl.trainer.stage_memory import CudaCounters

    assert CudaCounters("cuda").unbacked() == 0  # no engine in this process: nothing to subtract
    assert CudaCounters("cuda", unbacked=lambda: 3 * GIB).unbacked() == 3 * GIB


def test_nothing_is_read_off_cuda():
    c = FakeCounters(active=False)
    timer = StageTimer(StageMemory(c))
    timer.reset()
    timer("rollout", lambda: c.alloc(3))
    assert not any(k.startswith("memory_gb/") for k in timer.metrics())
    assert not any(k.startswith("memory_gb/") for k in StageTimer().metrics())  # a CPU trainer has none


def test_cuda_starting_inside_a_stage_still_counts_that_stage():
    c = FakeCounters(active=False)
    timer = StageTimer(StageMemory(c))
    timer.reset()

    def first_cuda_use():
        c.is_active = True
        c.alloc(4)

    timer("rollout", first_cuda_use)
    assert timer.metrics()["memory_gb/rollout"] == 4


def test_gpu_sampler_hands_memory_readings_to_the_open_stage():
    c = FakeCounters()
    memory = StageMemory(c)
    timer = StageTimer(memory)
    timer.reset()
    sampler = GpuUtilSampler(interval_s=0.001, read=lambda: None, read_memory=lambda: 12 * GIB,
                             on_memory=memory.observe_device).start()
    seen = threading.Event()

    def stage_body():
        deadline = time.time() + 5
        while time.time() < deadline and not memory.device_peaks.get("rollout"):
            time.sleep(0.001)
        seen.set()

    try:
        timer("rollout", stage_body)
    finally:
        sampler.stop()
    assert seen.is_set() and timer.metrics()["memory_gb/device/rollout"] == pytest.approx(12)


@pytest.mark.gpu
def test_cuda_counters_measure_a_real_allocation():
    """On a GPU: a stage that allocates 256 MiB beside 64 MiB held reports at least 320 MiB, the one after
    it (nothing new) about the 64 MiB held, and the device reading (NVML, when installed) at least that."""
    import torch

    from verl.trainer.stage_memory import CudaCounters

    device = torch.device("cuda")
    held = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    memory = StageMemory(CudaCounters(device))
    timer = StageTimer(memory)
    timer.reset()
    timer("big", lambda: torch.empty(256 * 2**20, dtype=torch.uint8, device=device).fill_(1))
    timer("small", lambda: held.add_(1))
    m = timer.metrics()
    assert m["memory_gb/big"] >= 320 / 1024 and m["memory_gb/small"] < m["memory_gb/big"] - 200 / 1024, m
    assert m["memory_gb/small"] >= 64 / 1024 and m["memory_gb/step"] == m["memory_gb/big"]
    assert not any(k.startswith("memory/alloc_retries/") for k in m), m  # 320 MiB of 140 GiB: no retry
    if "memory_gb/device/big" in m:
        assert m["memory_gb/device/big"] >= m["memory_gb/big"]
