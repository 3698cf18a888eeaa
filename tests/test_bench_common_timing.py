"""benchmarks/common.py's timing helpers: the interleaved order and the garbage-collector tally."""

from __future__ import annotations

import gc
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import common  # noqa: E402


def test_interleaved_rounds_rotate_the_order_and_tally_full_collections():
    calls = []

    def path(name, collect):
        def fn():
            calls.append(name)
            if collect:
                gc.collect()  # one full collection inside this path's call, none in the other's
            return name
        return fn

    stats: dict = {}
    out = common.timed_interleaved({"a": path("a", True), "b": path("b", False)}, rounds=3, gc_stats=stats)
    assert calls == ["a", "b", "b", "a", "a", "b"]  # round r starts at the r-th path
    assert set(out) == {"a", "b"} and out["a"][0] == "a" and len(out["a"][2]) == 3
    assert [full for _, full in stats["a"]] == [1, 1, 1] and all(sec > 0 for sec, _ in stats["a"])
    assert all(full == 0 for _, full in stats["b"])  # (a young-generation collection may still land there)


def test_gc_tally_leaves_the_callbacks_as_it_found_them():
    before = list(gc.callbacks)
    with common.GcTally() as tally:
        gc.collect()
        gc.collect(0)  # a young collection: counted in the seconds, not as a full one
    assert tally.full == 1 and tally.seconds > 0 and gc.callbacks == before
