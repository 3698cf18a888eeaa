"""kill -9 at named points of the save sequence, then `verl train --resume auto` to completion:
everything saved is recovered, and the result equals an uninterrupted run.

Each run is a child forked from this (already warmed-up) process that runs `verl.cli.main`;
VERL_TEST_KILL_AT=<point>:<n> makes the child SIGKILL itself the n-th time it reaches <point>
(verl.checkpoint.durable_files.test_kill_point; the points are listed in docs/reliability.md).
Forking skips the interpreter start and imports, so 16 kill points take about 30 s on 2 cores.
"""

import json
import os
import signal
import sys
import time

import pytest
import torch

from conftest import small_overrides

STEPS = 3
# PPO with a critic (the default algorithm): actor, critic, both optimizers and RNG states are
# all part of what a full checkpoint must bring back.
RUN = {"training.total_steps": STEPS, "training.batch_size": 2, "training.micro_batch_size": 2,
       "rollout.max_new_tokens": 4, "checkpoint.save_full_every": 1}

# (point, n): the n-th time the point is reached. Steps 1..3 each save a full checkpoint
# (save_full_every=1); the final save then writes the actor into save_dir and run_state.json.
POINTS = [
    ("ckpt_filled", 2),            # step 2's temp folder filled, no manifest yet
    ("ckpt_manifest", 2),          # manifest written, folder not yet renamed
    ("ckpt_renamed", 2),           # step_000002 complete; both pointers still name step 1
    ("tmp:latest", 2),             # latest.tmp-PID written, not yet renamed
    ("pointer_latest", 2),         # latest names step 2, latest_full still step 1
    ("pointer_latest_full", 2),    # both pointers name step 2, not yet pruned
    ("ckpt_filled", 3),            # the last step's checkpoint cut short
    ("ckpt_renamed", 3),           # the last step's checkpoint complete, pointers stale
    ("pointer_latest_full", 3),    # the last step's checkpoint complete, before the final save
    ("model_tmp_filled", 1),       # final actor complete in save_dir/.tmp-save-PID/, nothing moved in
    ("model_half_moved", 1),       # half of the final files moved in (config, no weights)
    ("model_moved", 1),            # every final file in place, temp folder not yet removed
    ("final_before_run_state", 1),  # final save done, run_state.json not written
    ("tmp:run_state.json", 1),     # run_state.json.tmp-PID written, not renamed
    ("final_after_run_state", 1),  # everything written; killed before the process exits
]
# Points after which the dead run's temp files are still there: the resume must say it removed them.
LEAVES_TEMP = {"ckpt_filled", "ckpt_manifest", "tmp:latest", "tmp:run_state.json"}
# Points inside the final save's moves, after every file was complete: the resume finishes the moves.
PROMOTED = {"model_tmp_filled", "model_half_moved", "model_moved"}


def _args(tmp, save_dir, *extra):
    return ["train", *small_overrides(tmp, **RUN), "--save_full_state", "--save_dir", str(save_dir), *extra]


def _fork_cli(argv, log, kill_at=None, timeout=180):
    """Run `verl <argv>` in a forked child with stdout/stderr into `log`; returns its exit code
    (negative: the signal that ended it). Single-threaded torch in every child, so that all runs
    compute with the same reduction order and can be compared bit for bit."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 98
        try:
            if kill_at:
                os.environ["VERL_TEST_KILL_AT"] = kill_at
            torch.set_num_threads(1)
            fd = os.open(str(log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = open(1, "w", buffering=1, closefd=False)  # pytest had replaced both
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            from verl import cli

            code = cli.main(list(argv))
        except BaseException as exc:  # noqa: BLE001 - reported through the log and the exit code
            print(f"child failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 99
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"verl {' '.join(argv)} did not end in {timeout} s; log: {log.read_text()[-2000:]}")
        time.sleep(0.02)


def _tensors(obj, prefix=""):
    """Every tensor in a nested state (optimizer/scheduler dicts), by its path, plus the other
    leaves as they are."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_tensors(v, f"{prefix}/{k}"))
        return out
    if isinstance(obj, (list, tuple)):
        out = {}
        for i, v in enumerate(obj):
            out.update(_tensors(v, f"{prefix}/{i}"))
        return out
    return {prefix: obj}


def _state_files(run_dir):
    """The final actor and everything in the last full checkpoint, as tensors and values."""
    from safetensors.torch import load_file

    from verl.checkpoint.durable_files import load_torch

    ckpt = os.path.join(run_dir, "checkpoints", f"step_{STEPS:06d}")
    out = {"final": load_file(os.path.join(run_dir, "model.safetensors")),
           "actor": load_file(os.path.join(ckpt, "actor", "model.safetensors")),
           "critic": load_file(os.path.join(ckpt, "critic", "model.safetensors"))}
    for name in ("actor", "critic"):
        out[f"optim/{name}"] = _tensors(load_torch(os.path.join(ckpt, "optim", f"{name}.pt")))
    return out


def _assert_equal_states(got, want):
    # The same code path on the same CPU with one thread: a resumed run computes exactly what the
    # uninterrupted one did, so every tensor must be bit-identical (torch.equal), not merely close.
    assert got.keys() == want.keys()
    for part in want:
        assert got[part].keys() == want[part].keys(), part
        for key, value in want[part].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(got[part][key], value), (part, key)
            else:
                assert got[part][key] == value, (part, key)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_gpt2):
    from verl import create_trainer, load_config

    tmp = tmp_path_factory.mktemp("kill_ref")
    # Warm this process up (imports, tokenizer and model classes) once, so that the forked
    # children start training at once; the trainer itself is not used.
    warm = create_trainer(load_config(None, small_overrides(tmp, **RUN, **{"checkpoint.save_dir": str(tmp / "warm")})))
    warm.run.close()
    del warm
    code = _fork_cli(_args(tmp, tmp / "run"), tmp / "log")
    assert code == 0, (tmp / "log").read_text()[-3000:]
    return {"tmp": tmp, "state": _state_files(str(tmp / "run"))}


def _leftovers(run_dir):
    from verl.checkpoint.manager import temp_owner

    return [os.path.join(root, n) for root, dirs, files in os.walk(run_dir) for n in dirs + files
            if temp_owner(n) is not None]


@pytest.mark.parametrize("point,nth", POINTS, ids=[f"{p}:{n}" for p, n in POINTS])
def test_kill_then_resume_recovers_everything(reference, tmp_path, point, nth):
    from transformers import AutoModelForCausalLM

    from verl.checkpoint.run_folder import final_save_problem, read_run_state

    run = tmp_path / "run"
    code = _fork_cli(_args(tmp_path, run), tmp_path / "killed.log", kill_at=f"{point}:{nth}")
    assert code == -signal.SIGKILL, (point, code, (tmp_path / "killed.log").read_text()[-3000:])
    code = _fork_cli(_args(tmp_path, run, "--resume", "auto"), tmp_path / "resumed.log")
    out = (tmp_path / "resumed.log").read_text()
    assert code == 0, out[-3000:]
    if point in LEAVES_TEMP:
        assert "removed what interrupted saves left" in out, out[-3000:]
    if point in PROMOTED:
        assert "are now in place" in out and "removed what interrupted saves left" not in out, out[-3000:]
    if point == "final_after_run_state":
        assert "already finished at step 3" in out
    state = read_run_state(str(run))
    assert state["finished"] is True and state["global_step"] == STEPS
    assert final_save_problem(str(run), state) is None
    AutoModelForCausalLM.from_pretrained(str(run))  # the final actor folder is complete and loads
    assert not _leftovers(run)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))  # every step exactly once
    _assert_equal_states(_state_files(str(run)), reference["state"])


def test_resume_warnings_are_printed_once(reference, tmp_path):
    """A corrupted newest checkpoint: `--resume auto` warns once (not once per resolve), resumes
    from the one before, and its last line does not hide what it found."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference["tmp"] / "run", run)
    # Resume needs a run that has not finished: forget the final save, keep the checkpoints.
    os.unlink(run / "run_state.json")
    target = run / "checkpoints" / f"step_{STEPS:06d}" / "rng.pt"
    data = bytearray(target.read_bytes())
    data[-5] ^= 0xFF  # same size, different checksum
    target.write_bytes(bytes(data))
    code = _fork_cli(_args(tmp_path, run, "--resume", "auto"), tmp_path / "log")
    out = (tmp_path / "log").read_text()
    assert code == 0, out[-3000:]
    assert out.count("skipping checkpoint") == 1 and "rng.pt" in out
    assert f"resuming from {run / 'checkpoints' / f'step_{STEPS - 1:06d}'}" in out
    assert "training finished at step 3" in out
    _assert_equal_states(_state_files(str(run)), reference["state"])


def test_killed_actor_only_final_save_keeps_the_weights(reference, tmp_path):
    """An actor-only run (no full checkpoint: the final save is the only copy of the trained
    weights) killed while its final files move into place. The next run in the folder, a fresh
    one that is refused because an earlier run is there, finishes the moves instead of removing
    the temp folder: the weights in save_dir then equal those of the same run uninterrupted."""
    from safetensors.torch import load_file

    only_actor = {**RUN, "checkpoint.save_full_every": 0}

    def args(save_dir, *extra):
        return ["train", *small_overrides(tmp_path, **only_actor), "--save_actor_only", "--save_dir", str(save_dir),
                *extra]

    assert _fork_cli(args(tmp_path / "whole"), tmp_path / "whole.log") == 0, (tmp_path / "whole.log").read_text()
    want = load_file(str(tmp_path / "whole" / "model.safetensors"))
    run = tmp_path / "run"
    code = _fork_cli(args(run), tmp_path / "killed.log", kill_at="model_half_moved:1")
    assert code == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    assert not (run / "model.safetensors").exists()  # half moved: the weights are still in the temp folder
    code = _fork_cli(args(run), tmp_path / "refused.log")
    out = (tmp_path / "refused.log").read_text()
    assert code == 2, out[-3000:]
    assert "are now in place" in out and "removed what interrupted saves left" not in out, out[-3000:]
    assert not _leftovers(run)
    got = load_file(str(run / "model.safetensors"))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
