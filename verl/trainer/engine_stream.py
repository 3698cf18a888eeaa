"""The CUDA stream of the asynchronous producer's engine work (`async_training.engine_priority`).

    with producer_stream(device, "high"):   # the producer thread: engine steps, syncs, generation
        ...
    done = update_event(device, "high")     # the trainer thread, as an update ends
    wait_for(done)                          # the producer thread, before it reads the new weights

normal (the default): the engine runs on the stream it picks in the producer thread (vLLM makes one per
thread), and its kernels compete for the GPU's SMs with the update's on equal terms. On the H200 (bf16) an
engine step took 2.96 ms alone and 3.75 ms beside the update (on the H200, 2026-12-02, docs/async.md).

high: the producer thread runs on a stream of the device's highest priority, so the GPU's block scheduler
starts the engine's small decode kernels ahead of the update's waiting blocks. The weight sync then runs
on a stream the update's is not ordered with: the trainer records an event when an update ends and the
producer's stream waits for it before it reads the weights. (At normal priority the update's own host
reads of its metrics, after the optimizer step, already finish its kernels before the lock is released.)
Measured slower than normal on the H200 (3.43 against 2.56 s a step at staleness 1, one run each): opt-in.

Why by hand: PyTorch gives the stream and its priority; which thread's work goes on it is verl's choice.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch


def _high(device, priority: str) -> bool:
    return priority == "high" and torch.device(device).type == "cuda"


@contextlib.contextmanager
def producer_stream(device, priority: str):
    """The calling thread's CUDA work on a stream of the highest priority (`priority` "high" on a CUDA
    device; vLLM's patched torch.cuda.set_stream records it as the thread's stream too); else nothing."""
    if not _high(device, priority):
        yield None
        return
    _, greatest = torch.cuda.Stream.priority_range()  # (least, greatest): lower numbers run first
    stream = torch.cuda.Stream(device=torch.device(device), priority=greatest)
    with torch.cuda.stream(stream):
        yield stream


def update_event(device, priority: str) -> Optional[torch.cuda.Event]:
    """An event on the calling thread's current stream (the update's last kernels), where the producer
    runs on a stream of its own ("high" on CUDA); else None."""
    if not _high(device, priority):
        return None
    event = torch.cuda.Event()
    event.record()
    return event


def wait_for(event: Optional[torch.cuda.Event]) -> None:
    """The calling thread's current stream waits (on the GPU, the host does not) for `event`."""
    if event is not None:
        torch.cuda.current_stream().wait_event(event)
