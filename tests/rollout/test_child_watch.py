"""The watch on an engine's own processes (verl/rollout/child_watch.py), with real child processes:
a child killed with SIGKILL is reported within a few polls, by pid and title; one that is alive is
not; and the line the SGLang backend prints for a lost engine process names it and the checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from verl.rollout.child_watch import ChildWatch, child_pids, process_name

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="the watch reads /proc (Linux)")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def two_children():
    procs = [subprocess.Popen(SLEEPER) for _ in range(2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_child_pids_lists_this_process_children(two_children):
    pids = child_pids()
    assert {p.pid for p in two_children} <= pids
    assert os.getpid() not in pids
    assert "time.sleep(120)" in process_name(two_children[0].pid)


def test_a_killed_child_is_reported_with_its_pid_and_name_and_a_live_one_is_not(two_children):
    victim, survivor = two_children
    seen, called = [], threading.Event()

    def on_death(dead):
        seen.extend(dead)
        called.set()

    watch = ChildWatch({victim.pid, survivor.pid}, on_death, interval_s=0.05).start()
    try:
        time.sleep(0.3)
        assert not called.is_set()  # both alive: nothing to report
        os.kill(victim.pid, signal.SIGKILL)  # not reaped: a zombie until Popen.wait
        assert called.wait(5)
        assert [pid for pid, _ in seen] == [victim.pid]
        assert "time.sleep(120)" in seen[0][1]  # the name read when the watch started
    finally:
        watch.stop()


def test_a_stopped_watch_says_nothing(two_children):
    called = threading.Event()
    watch = ChildWatch({two_children[0].pid}, lambda dead: called.set(), interval_s=0.05).start()
    watch.stop()
    two_children[0].kill()
    assert not called.wait(0.5)


def test_the_sglang_loss_line_names_the_dead_process_and_the_checkpoint(tmp_path):
    from verl import signals
    from verl.rollout.sglang_rollout import engine_loss_line, engine_processes

    with signals.GracefulStop(5):  # a fresh record of checkpoints for this test
        line = engine_loss_line([(4242, "sglang::scheduler")])
        assert line.startswith("error: SGLang engine process lost: sglang::scheduler (pid 4242) died")
        assert "this run has no full checkpoint yet" in line
        signals.note_checkpoint(str(tmp_path / "step_000002"), resumable=True)
        signals.note_checkpoint(str(tmp_path / "step_000003"), resumable=False)  # actor weights only
        line = engine_loss_line([])
        assert f"the last full checkpoint {tmp_path / 'step_000002'} is intact" in line
        assert "--resume auto" in line
    # untitled children: all of them are the engine's (no SGLang title to pick by)
    assert engine_processes({os.getpid()}) == {os.getpid()}
