"""Checkpoint storage: atomic folders, manifests with checksums, the `latest` pointer, crash
safety (a write that fails halfway, a process SIGKILLed mid-save), pruning, safe loading."""

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from verl.checkpoint.manager import CheckpointError, CheckpointManager, verify_checkpoint
from verl.checkpoint.durable_files import load_torch, save_torch
from verl.checkpoint.rng_state import capture_rng, restore_rng


def _writer(value: float, n: int = 3):
    def write(folder):
        save_torch({"w": torch.full((n,), value)}, os.path.join(folder, "optim", "a.pt"))
        with open(os.path.join(folder, "trainer_state.json"), "w") as fh:
            json.dump({"value": value}, fh)
    return write


def _value(path):
    verify_checkpoint(path)
    return float(load_torch(os.path.join(path, "optim", "a.pt"))["w"][0])


def test_save_layout_manifest_and_pointers(tmp_path):
    mgr = CheckpointManager(str(tmp_path), keep_last=2)
    path = mgr.save(7, "full", _writer(1.0))
    assert path == str(tmp_path / "checkpoints" / "step_000007")
    manifest = json.loads((tmp_path / "checkpoints" / "step_000007" / "manifest.json").read_text())
    assert manifest["kind"] == "full" and manifest["step"] == 7
    assert set(manifest["files"]) == {"optim/a.pt", "trainer_state.json"}
    for rel, info in manifest["files"].items():
        assert info["size"] == os.path.getsize(os.path.join(path, rel)) and len(info["sha256"]) == 64
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000007"
    assert (tmp_path / "checkpoints" / "latest_full").read_text().strip() == "step_000007"
    mgr.save(8, "actor", _writer(2.0))
    assert mgr.pointer("latest").endswith("step_000008") and mgr.pointer("latest_full").endswith("step_000007")
    assert mgr.find_latest("full") == path
    assert not [n for n in os.listdir(mgr.root) if n.startswith(".")]  # no temp leftovers


def test_write_failing_halfway_keeps_previous(tmp_path):
    """A write that raises in the middle of a save (disk full, bug): the previous checkpoint
    stays complete and `latest` keeps pointing at it; no half folder gets a final name."""
    mgr = CheckpointManager(str(tmp_path))
    good = mgr.save(1, "full", _writer(1.0))

    def half(folder):
        _writer(2.0)(folder)
        with open(os.path.join(folder, "big.bin"), "wb") as fh:
            fh.write(b"x" * 1000)
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        mgr.save(2, "full", half)
    assert mgr.pointer("latest") == good and mgr.find_latest("full") == good
    assert _value(good) == 1.0
    assert sorted(os.listdir(mgr.root)) == ["latest", "latest_full", "step_000001"]


def test_failure_while_writing_pointer_keeps_previous(tmp_path, monkeypatch):
    import verl.checkpoint.manager as ck

    mgr = CheckpointManager(str(tmp_path))
    good = mgr.save(1, "full", _writer(1.0))
    real = ck.atomic_write_text

    def failing(path, text):
        if os.path.basename(path) == "latest":
            raise OSError("crash while replacing the pointer")
        real(path, text)

    monkeypatch.setattr(ck, "atomic_write_text", failing)
    with pytest.raises(OSError):
        mgr.save(2, "full", _writer(2.0))
    monkeypatch.setattr(ck, "atomic_write_text", real)
    assert mgr.pointer("latest") == good and _value(good) == 1.0
    # The new folder was complete before the pointer write, so it verifies too.
    assert _value(str(tmp_path / "checkpoints" / "step_000002")) == 2.0


CHILD = textwrap.dedent("""
    import os, sys, time, torch
    from verl.checkpoint.manager import CheckpointManager
    from verl.checkpoint.durable_files import save_torch
    mgr = CheckpointManager(sys.argv[1], keep_last=3)
    mode = sys.argv[2]
    def small(step):
        def write(folder):
            save_torch({"w": torch.full((1000,), float(step))}, os.path.join(folder, "optim", "a.pt"))
        return write
    mgr.save(1, "full", small(1))
    print("saved 1", flush=True)
    if mode == "slow":
        def slow(folder):
            small(2)(folder)
            with open(os.path.join(folder, "big.bin"), "wb") as fh:
                for i in range(2000):
                    fh.write(b"x" * (1 << 18)); fh.flush()
                    if i == 4:
                        print("writing", flush=True)
                    time.sleep(0.005)
        mgr.save(2, "full", slow)
    else:  # many quick saves: the kill lands at an arbitrary point of the protocol
        step = 2
        print("looping", flush=True)
        while True:
            mgr.save(step, "full", small(step))
            step += 1
""")


def _run_child(tmp_path, mode, wait_for, extra_delay):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), mode], stdout=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stdout.readline()
        if wait_for in line:
            break
    time.sleep(extra_delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_mid_save_keeps_previous(tmp_path):
    """kill -9 while a large checkpoint is being written: step 1 stays `latest` and loads."""
    _run_child(tmp_path, "slow", "writing", 0.05)
    mgr = CheckpointManager(str(tmp_path / "run"))
    latest = mgr.pointer("latest")
    assert latest.endswith("step_000001") and mgr.find_latest("full") == latest
    assert _value(latest) == 1.0
    assert not (tmp_path / "run" / "checkpoints" / "step_000002").exists()
    leftovers = [n for n in os.listdir(mgr.root) if n.startswith(".tmp-")]
    assert leftovers  # the dead process's temp folder ...
    mgr.prune()
    assert not [n for n in os.listdir(mgr.root) if n.startswith(".tmp-")]  # ... is cleaned up later


@pytest.mark.parametrize("delay", [0.3, 0.77])
def test_sigkill_at_arbitrary_moment(tmp_path, delay):
    """Many quick saves, killed at an arbitrary moment: whatever `latest` names is complete
    and verifies, and so does every step folder that has a final name."""
    _run_child(tmp_path, "loop", "looping", delay + random.random() * 0.2)
    mgr = CheckpointManager(str(tmp_path / "run"))
    latest = mgr.find_latest("full")
    assert latest is not None and _value(latest) == int(latest[-6:])
    for _, path in mgr.list():
        verify_checkpoint(path)


def test_keep_last_prunes_per_kind(tmp_path):
    mgr = CheckpointManager(str(tmp_path), keep_last=2)
    for step in range(1, 6):
        mgr.save(step, "full" if step % 2 else "actor", _writer(float(step)))
    names = sorted(n for n in os.listdir(mgr.root) if n.startswith("step_"))
    # full: 1, 3, 5 -> keep 3, 5; actor: 2, 4 -> keep both
    assert names == ["step_000002", "step_000003", "step_000004", "step_000005"]


def test_corrupted_checkpoint_is_detected_and_skipped(tmp_path):
    mgr = CheckpointManager(str(tmp_path), keep_last=5)
    first = mgr.save(1, "full", _writer(1.0))
    second = mgr.save(2, "full", _writer(2.0))
    target = os.path.join(second, "optim", "a.pt")
    data = bytearray(open(target, "rb").read())
    data[-10] ^= 0xFF  # flip one byte: same size, different checksum
    open(target, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        verify_checkpoint(second)
    warnings = []
    assert mgr.find_latest("full", warn=warnings.append) == first
    assert "skipping checkpoint" in warnings[0]


def test_pickled_code_is_refused(tmp_path):
    """Non-weight state loads with weights_only=True: a pickle that would run code is refused."""

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    path = tmp_path / "evil.pt"
    with open(path, "wb") as fh:
        pickle.dump({"optimizer": Evil()}, fh, protocol=2)
    with pytest.raises(CheckpointError, match="weights_only"):
        load_torch(str(path))
    assert not (tmp_path / "pwned").exists()


def test_rng_state_roundtrip_is_weights_only(tmp_path):
    import numpy as np
    g = torch.Generator().manual_seed(3)
    random.seed(1), np.random.seed(2), torch.manual_seed(4)
    torch.randn(3, generator=g)
    save_torch(capture_rng({"actor": g}), str(tmp_path / "rng.pt"))
    expected = (random.random(), np.random.rand(), torch.rand(1).item(), torch.rand(1, generator=g).item())
    random.seed(9), np.random.seed(9), torch.manual_seed(9), g.manual_seed(9)
    restore_rng(load_torch(str(tmp_path / "rng.pt")), {"actor": g})
    assert (random.random(), np.random.rand(), torch.rand(1).item(), torch.rand(1, generator=g).item()) == expected


def test_stale_pointer_does_not_make_an_older_checkpoint_win(tmp_path):
    """`latest_full` left naming step 1 (the pointer write failed, e.g. on a folder made
    read-only) while step 2 is complete: step 2 is taken, for both kinds, and the stale pointer
    is reported."""
    mgr = CheckpointManager(str(tmp_path), keep_last=5)
    mgr.save(1, "full", _writer(1.0))
    second = mgr.save(2, "full", _writer(2.0))
    (tmp_path / "checkpoints" / "latest_full").write_text("step_000001\n")
    (tmp_path / "checkpoints" / "latest").write_text("step_000001\n")
    notes = []
    assert mgr.find_latest("full", warn=notes.append) == second
    assert len(notes) == 1 and "latest_full names step_000001" in notes[0] and "step_000002" in notes[0]
    assert mgr.find_latest(None, warn=notes.append) == second
    assert _value(second) == 2.0


def test_newest_means_saved_last(tmp_path):
    """A run resumed from step 1 of 3 and saved again at step 2 outranks the step 3 it
    abandoned: `find_latest` continues the new line, not the old one; pruning agrees."""
    mgr = CheckpointManager(str(tmp_path), keep_last=2)
    for step in (1, 2, 3):
        mgr.save(step, "full", _writer(float(step)), prune=False)
    redone = mgr.save(2, "full", _writer(20.0), prune=False)
    assert mgr.find_latest("full") == redone and _value(redone) == 20.0
    mgr.prune()  # keeps the two saved last: the new step 2 and the old step 3
    assert sorted(n for n in os.listdir(mgr.root) if n.startswith("step_")) == ["step_000002", "step_000003"]
    assert mgr.find_latest("full") == redone


def test_atomic_write_leaves_no_temp_file_on_error(tmp_path, monkeypatch):
    from verl.checkpoint import durable_files

    target = tmp_path / "latest"
    target.write_text("step_000001\n")

    def failing_replace(src, dst):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(durable_files.os, "replace", failing_replace)
    with pytest.raises(OSError):
        durable_files.atomic_write_text(str(target), "step_000002\n")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["latest"] and target.read_text() == "step_000001\n"


def test_stale_temps_are_removed_and_reported(tmp_path):
    """What crashed saves leave (`.tmp-save-PID/` in save_dir, `.tmp-step_N-PID/` and
    `latest.tmp-PID` in checkpoints/, `run_state.json.tmp-PID`) is removed by the next run
    in the folder; other files stay."""
    from verl.checkpoint.run_folder import clean_stale_temps

    mgr = CheckpointManager(str(tmp_path))
    good = mgr.save(1, "full", _writer(1.0))
    (tmp_path / ".tmp-save-999999").mkdir()
    (tmp_path / ".tmp-save-999999" / "model.safetensors").write_bytes(b"x")
    (tmp_path / "run_state.json.tmp-999999").write_text("{}")
    (tmp_path / "checkpoints" / ".tmp-step_000002-999999").mkdir()
    (tmp_path / "checkpoints" / "latest.tmp-999999").write_text("step_000002\n")
    (tmp_path / "notes.txt").write_text("mine")
    removed = clean_stale_temps(str(tmp_path))
    assert sorted(removed) == sorted([".tmp-save-999999", "run_state.json.tmp-999999",
                                      os.path.join("checkpoints", ".tmp-step_000002-999999"),
                                      os.path.join("checkpoints", "latest.tmp-999999")])
    assert sorted(os.listdir(tmp_path)) == ["checkpoints", "notes.txt"]
    assert sorted(os.listdir(mgr.root)) == ["latest", "latest_full", "step_000001"]
    assert _value(good) == 1.0


def test_complete_interrupted_save_is_moved_in_not_removed(tmp_path):
    """A `.tmp-save-PID/` with the save's list of complete files: the files still in it move into
    save_dir (those already moved stay); a file whose size differs from the list makes it an
    incomplete save, removed as before."""
    import json

    from verl.checkpoint.model_files import COMPLETE_MARKER
    from verl.checkpoint.run_folder import clean_stale_temps

    done = tmp_path / ".tmp-save-999998"
    done.mkdir()
    (done / "model.safetensors").write_bytes(b"weights")  # 7 bytes, not yet moved
    (tmp_path / "config.json").write_text("{}")  # 2 bytes, moved before the crash
    (done / COMPLETE_MARKER).write_text(json.dumps({"files": {"model.safetensors": 7, "config.json": 2}}))
    bad = tmp_path / "sub"
    bad.mkdir()
    (bad / ".tmp-save-999997").mkdir()
    (bad / ".tmp-save-999997" / "model.safetensors").write_bytes(b"short")  # 5 bytes, 9 listed
    (bad / ".tmp-save-999997" / COMPLETE_MARKER).write_text(json.dumps({"files": {"model.safetensors": 9}}))
    told = []
    assert clean_stale_temps(str(tmp_path), told.append) == []
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors", "sub"]
    assert (tmp_path / "model.safetensors").read_bytes() == b"weights"
    assert len(told) == 1 and "2 files are now in place" in told[0]
    from verl.checkpoint.model_files import promote_interrupted_save

    assert promote_interrupted_save(str(bad / ".tmp-save-999997")) is None
    assert os.listdir(bad / ".tmp-save-999997")  # untouched: clean_stale_temps removes it as incomplete
