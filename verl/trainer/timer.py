"""Per-stage wall-clock timing (and, given a StageMemory, peak memory), kept out of the trainer's
step body.

    class Trainer:
        @stage("rollout")
        def generate_experience(self, prompts): ...   # timed into self.timer as timing_s/rollout
"""

from __future__ import annotations

import functools
import threading
import time

import torch


class StageTimer:
    """`timer("rollout", fn, *args)` runs fn and adds its seconds to `timing_s/rollout`.

    Times are exclusive: a stage timed inside another (reward inside rollout) is charged
    to itself only, so the stages add up to the step time.
    """

    def __init__(self, memory=None):
        """memory: a StageMemory (verl/trainer/stage_memory.py) to measure each stage's peak memory."""
        self.seconds: dict[str, float] = {}
        self._stack: list[float] = []  # time already charged to nested stages, per open stage
        self._owner = threading.get_ident()
        self.memory = memory

    def reset(self) -> None:
        """A new step, timed in the calling thread; calls from other threads (the asynchronous
        rollout's producer) run untimed, since their seconds overlap the step's own."""
        self.seconds = {}
        self._stack = []
        self._owner = threading.get_ident()
        if self.memory is not None:
            self.memory.reset()

    def __call__(self, stage: str, fn, *args, **kwargs):
        if threading.get_ident() != self._owner:
            return fn(*args, **kwargs)
        start = time.perf_counter()
        self._stack.append(0.0)
        if self.memory is not None:
            self.memory.enter(stage)
        try:
            result = fn(*args, **kwargs)
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()  # GPU work is asynchronous: charge it to this stage (a CPU run
                # never initialises CUDA; synchronize() would, even on a GPU machine)
        finally:
            if self.memory is not None:
                self.memory.exit()
            total = time.perf_counter() - start
            nested = self._stack.pop()
            self.seconds[stage] = self.seconds.get(stage, 0.0) + total - nested
            if self._stack:
                self._stack[-1] += total
        return result

    def metrics(self) -> dict[str, float]:
        out = {f"timing_s/{k}": v for k, v in self.seconds.items()}
        out["timing_s/step"] = sum(self.seconds.values())
        if self.memory is not None:
            out.update(self.memory.metrics())
        return out


def stage(name: str):
    """Method decorator: each call is timed by the instance's `timer` (a StageTimer) as `name`."""
    def decorate(method):
        @functools.wraps(method)
        def timed(self, *args, **kwargs):
            return self.timer(name, method, self, *args, **kwargs)
        return timed
    return decorate
