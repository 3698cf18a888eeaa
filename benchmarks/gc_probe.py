"""Probes of Python's garbage collector for the benchmarks: how long a timed call spent in it
(`GcTally`, used by common.timed_interleaved for the rollout tables' gc_s / gc_full columns), and a
path with it paused (`gc_paused`). Why: on the H200 verl's seconds around SGLang's call grew 7x from
64 to 256 sequences, where this 2-core machine's grow 3x; a full collection walks the whole heap."""

from __future__ import annotations

import gc
import time


class GcTally:
    """While active (a `with` block): the seconds this process spent in Python's garbage collector
    and the number of full (generation 2) collections, from gc.callbacks. A full collection walks
    every tracked object of the process (an engine's, a model's), so one that lands inside a call
    costs in proportion to the whole heap, not to the call's own work."""

    def __init__(self):
        self.seconds, self.full, self._start = 0.0, 0, None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.seconds += time.perf_counter() - self._start
            self.full += info.get("generation") == 2
            self._start = None

    def __enter__(self) -> "GcTally":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def gc_paused(fn):
    """fn with Python's garbage collector off for the call and back on after it (a benchmark path,
    not verl's code: it shows whether the collections that land in a call explain its time; what
    the call freed by reference counting is gone before the next collection)."""

    def call():
        was_on = gc.isenabled()
        gc.disable()
        try:
            return fn()
        finally:
            if was_on:
                gc.enable()

    return call
