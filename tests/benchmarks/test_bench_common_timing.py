"""benchmarks/common.py's timing helpers (the interleaved order, a failed system's summary line) and
benchmarks/gc_probe.py (the garbage-collector tally and the paused path)."""

from __future__ import annotations

import gc
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import common  # noqa: E402
import gc_probe  # noqa: E402


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
    with gc_probe.GcTally() as tally:
        gc.collect()
        gc.collect(0)  # a young collection: counted in the seconds, not as a full one
    assert tally.full == 1 and tally.seconds > 0 and gc.callbacks == before


def test_gc_paused_turns_the_collector_off_for_the_call_only():
    seen = []
    assert gc_probe.gc_paused(lambda: seen.append(gc.isenabled()) or "out")() == "out"
    assert seen == [False] and gc.isenabled()

    def fails():
        raise ValueError("x")

    try:
        gc_probe.gc_paused(fails)()
    except ValueError:
        pass
    assert gc.isenabled()  # back on after an error too
    gc.disable()
    try:
        gc_probe.gc_paused(lambda: None)()
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()


# The end of the stderr of the H200 run's failed sync system (2026-12-01), abridged.
H200_STDERR = """INFO 12-01 20:18:02 [block_pool.py:790] Successfully reset prefix cache
CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:163
[rank0]: Traceback (most recent call last):
[rank0]:   File "/work/main/benchmarks/async_grpo.py", line 262, in <module>
[rank0]:     python_create_and_map(*allocation_handle)
[rank0]: RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:163
[rank0]:[W1201 20:18:03.771887855 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() was not called"""


def test_failure_summary_names_the_error_line_not_the_exit_warnings():
    line = common.failure_summary(1, H200_STDERR)
    assert line == ("OOM exit 1: [rank0]: RuntimeError: CUDA Error: out of memory at "
                    "/workspace/csrc/cumem_allocator.cpp:163")
    # No line names an error: the last three lines, as before.
    assert common.failure_summary(2, "a\nb\nc\nd") == "exit 2: b | c | d"
    assert common.failure_summary(1, "", "only stdout") == "exit 1: only stdout"
