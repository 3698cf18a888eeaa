"""The run folder: one run at a time (save_dir/.verl.lock), no earlier run deleted or written
over, and a save_dir that cannot work refused before any model loads."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.config import ConfigError

TINY = {"training.total_steps": 1, "training.batch_size": 2, "training.micro_batch_size": 2,
        "rollout.max_new_tokens": 4, "algorithm.name": "grpo", "rollout.n": 2}


def _verl(*args, **kw):
    return subprocess.run([sys.executable, "-m", "verl.cli", "train", *args], capture_output=True, text=True,
                          timeout=300, **kw)


def _one_line_exit_2(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: checkpoint.save_dir: "), proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _train(tmp_path, save_dir, **extra):
    cfg = load_config(None, small_overrides(tmp_path, **TINY, **{"checkpoint.save_dir": str(save_dir)}, **extra))
    trainer = create_trainer(cfg)
    trainer.train()
    return trainer


# ---------------------------------------------------------------------------
# The lock
# ---------------------------------------------------------------------------


def test_second_run_on_a_busy_folder_is_refused_at_once(tmp_path, tiny_gpt2):
    """While a run trains in a folder, a second run there (fresh or --resume auto) exits 2 with
    one line naming the other process, before it loads a model or touches a file; the first
    run goes on with its own steps and config (stopped by SIGTERM once the second was refused)."""
    out = tmp_path / "run"
    args = small_overrides(tmp_path, **{**TINY, "training.total_steps": 500, "checkpoint.save_dir": str(out)})
    first = subprocess.Popen([sys.executable, "-m", "verl.cli", "train", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and first.poll() is None and not (metrics.exists() and metrics.read_text()):
        time.sleep(0.05)
    assert first.poll() is None, first.communicate()[1][-3000:]  # still training
    before = sorted(os.listdir(out))
    # model.name points nowhere: had the second run got as far as loading a model, it would say so.
    with ThreadPoolExecutor(max_workers=2) as pool:
        seconds = list(pool.map(lambda extra: _verl(*args, f"model.name={tmp_path / 'no_model'}", "training.lr=0.5",
                                                    *extra), ([], ["--resume", "auto"])))
    for second in seconds:
        line = _one_line_exit_2(second, f"{out} is in use by pid {first.pid}", "started", "command",
                                "use another --save_dir")
        assert "no_model" not in line
    assert set(before) <= set(os.listdir(out))  # nothing moved away under the first run
    assert first.poll() is None, first.communicate()[1][-3000:]  # the refusals came while it trained
    first.send_signal(signal.SIGTERM)
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0 and "stopped by SIGTERM" in stdout, stderr[-3000:]
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))  # one run's steps, not interleaved with another's
    assert "lr: 0.5" not in (out / "config.yaml").read_text()  # the first run's config


HOLDER = textwrap.dedent("""
    import sys, time
    from verl.checkpoint.run_lock import hold_run_folder
    hold_run_folder(sys.argv[1])
    print("held", flush=True)
    time.sleep(300)
""")


def test_lock_of_a_killed_run_is_not_stale(tmp_path):
    """The lock is the kernel's (flock): a holder killed with SIGKILL leaves no stale lock."""
    from verl.checkpoint.run_lock import RunLock, hold_run_folder

    folder = tmp_path / "run"
    folder.mkdir()
    (tmp_path / "holder.py").write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(tmp_path / "holder.py"), str(folder)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(ConfigError, match=f"is in use by pid {holder.pid} "):
        RunLock(str(folder)).acquire()
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    lock = hold_run_folder(str(folder))  # taken at once: nothing to clean up by hand
    assert json.loads((folder / ".verl.lock").read_text())["pid"] == os.getpid()
    lock.release()


# ---------------------------------------------------------------------------
# Earlier runs
# ---------------------------------------------------------------------------


def test_fresh_runs_never_delete_or_overwrite_an_earlier_run(tmp_path, tiny_gpt2):
    """A fresh run over an actor-only run is refused (exit 2, naming --resume auto, a new
    --save_dir and --overwrite) and leaves its model untouched; with --overwrite each earlier
    run moves to its own previous_run_N/, byte for byte, and a third run deletes nothing."""
    out = tmp_path / "run"
    _train(tmp_path, out)  # actor-only (the default save mode): model.safetensors in out
    first_model = (out / "model.safetensors").read_bytes()
    first_metrics = (out / "metrics.jsonl").read_text()
    args = small_overrides(tmp_path, **{**TINY, "checkpoint.save_dir": str(out),
                                        "model.name": str(tmp_path / "no_model")})
    proc = _verl(*args)
    _one_line_exit_2(proc, "holds an earlier run", "model.safetensors", "--resume auto", "--save_dir",
                     "--overwrite", "previous_run_1")
    assert (out / "model.safetensors").read_bytes() == first_model
    assert not (out / "previous_run_1").exists()

    _train(tmp_path, out, **{"checkpoint.overwrite": "true", "training.lr": 0.01})  # --overwrite
    assert (out / "previous_run_1" / "model.safetensors").read_bytes() == first_model
    assert (out / "previous_run_1" / "metrics.jsonl").read_text() == first_metrics
    second_model = (out / "model.safetensors").read_bytes()
    assert second_model != first_model

    _train(tmp_path, out, **{"checkpoint.overwrite": "true", "training.lr": 0.02})  # a third run
    assert (out / "previous_run_1" / "model.safetensors").read_bytes() == first_model  # still there
    assert (out / "previous_run_2" / "model.safetensors").read_bytes() == second_model
    assert {"previous_run_1", "previous_run_2", "model.safetensors", "metrics.jsonl"} <= set(os.listdir(out))


def test_auto_with_nothing_to_resume_keeps_the_earlier_files(tmp_path, tiny_gpt2):
    """--resume auto where the earlier run left no checkpoint (killed before its first one): it
    starts from step 0 and the earlier files move to previous_run_1/ instead of being appended to."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    trainer = _train(tmp_path, out, **{"checkpoint.resume": "auto"})
    assert trainer.global_step == 1
    assert json.loads((out / "previous_run_1" / "metrics.jsonl").read_text())["reward/mean"] == 0.5
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1


# ---------------------------------------------------------------------------
# A save_dir that cannot work
# ---------------------------------------------------------------------------


def _unwritable(tmp_path):
    """A folder this process cannot write into: a read-only folder, or for root (whom
    permissions do not stop) /proc, where no file can be created."""
    if os.geteuid() == 0:
        return "/proc"
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return str(folder)


def test_save_dir_that_cannot_work_is_refused_before_the_model_loads(tmp_path):
    """A file, a folder under a file, or a folder that cannot be written: one line naming
    checkpoint.save_dir, exit 2, before any model loads (model.name points nowhere, so a run that
    got that far would name the model instead). resolve_resume, which the CLI and the Trainer
    call before anything else, does the check; one case goes through the CLI for the exit code."""
    from verl.checkpoint.resume import resolve_resume

    (tmp_path / "a_file").write_text("not a folder")
    cases = {str(tmp_path / "a_file"): "is a file",
             str(tmp_path / "a_file" / "sub"): "lies under",
             _unwritable(tmp_path): "not writable"}
    for save_dir, fragment in cases.items():
        over = {**TINY, "checkpoint.save_dir": save_dir, "model.name": str(tmp_path / "no_model")}
        with pytest.raises(ConfigError, match=fragment) as err:
            resolve_resume(load_config(None, small_overrides(tmp_path, **over)))
        assert str(err.value).startswith(f"checkpoint.save_dir: {save_dir} ")
        with pytest.raises(ConfigError, match=fragment):  # the Trainer answers before loading the model too
            create_trainer(load_config(None, small_overrides(tmp_path, **over)))
    args = small_overrides(tmp_path, **{**TINY, "checkpoint.save_dir": str(tmp_path / "a_file" / "sub"),
                                        "model.name": str(tmp_path / "no_model")})
    line = _one_line_exit_2(_verl(*args), "lies under")
    assert "no_model" not in line
    assert (tmp_path / "a_file").read_text() == "not a folder"


def test_a_checkpoint_folder_that_refuses_writes_mid_run_is_one_line_exit_2(tmp_path, tiny_gpt2, monkeypatch,
                                                                             capsys):
    """checkpoints/ becomes unwritable after step 1's checkpoint (read-only, or a full disk; the suite
    may run as root, where chmod does not stop writes, so the refusal is the OS error itself): step 2's
    save ends the run with one line naming checkpoint.save_dir, the folder and the reason, exit 2, and
    step 1's checkpoint stays complete."""
    from verl.checkpoint.manager import CheckpointManager
    from verl.cli import main

    save = tmp_path / "run"
    real_makedirs = os.makedirs
    ckpts = str(save / "checkpoints")

    def refusing(path, *args, **kwargs):
        if os.path.basename(str(path)).startswith(".tmp-step_000002"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", refusing)
    code = main(["train", *small_overrides(tmp_path, **{"training.total_steps": 3, "checkpoint.save_full_every": 1,
                                                        "checkpoint.save_dir": str(save)})])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err[-3:]
    assert err[-1].startswith("error: checkpoint.save_dir: step 2's checkpoint could not be written to "), err[-1]
    assert "Permission denied" in err[-1] and ckpts in err[-1]
    assert CheckpointManager(str(save)).find_latest("full", warn=print).endswith("step_000001")
