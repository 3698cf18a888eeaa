"""Resuming the asynchronous modes (docs/async.md, "Resuming"): a run stopped after its step-2
checkpoint, with batches drawn ahead by the producer (staleness 1 and 2, partial rollouts), and
resumed trains exactly the prompts the uninterrupted run trains at steps 3-4, each step once: nothing
counted twice or lost. Staleness 0 is bitwise (tests/async/test_async_training.py); above it the batches that
were in flight at the stop are generated again after the resume, with the restored (newer) weights,
so the weights after the resume are not the uninterrupted run's: that is the one stated difference.
kill -9 in the middle of step 3 of an asynchronous run, then --resume auto: every step once."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import small_overrides
from test_async_training import BASE, _run_recording, resume_after_step_2

ASYNC = {"async_training.enable": "true", "rollout.hf_weight_copy": "true", "checkpoint.save_full_every": 2}


@pytest.mark.parametrize("extra", [
    {"async_training.max_staleness": 1},
    {"async_training.max_staleness": 2},
    {"async_training.max_staleness": 1, "async_training.partial_rollout": "true", "async_training.segment_tokens": 2},
], ids=["staleness1", "staleness2", "partial"])
def test_resume_trains_the_same_prompts_each_once(tmp_path, tiny_gpt2, extra):
    extra = {**ASYNC, **extra}
    whole, whole_params = _run_recording(tmp_path, "whole", 4, **extra)
    resumed, params = resume_after_step_2(tmp_path, extra)
    assert resumed == [whole[2]["prompts"], whole[3]["prompts"]]  # the same prompts, in order, once each
    # each step logged once
    steps = [json.loads(line)["step"] for line in open(tmp_path / "parts" / "out" / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4]
    assert any(not torch.equal(params[n], whole_params[n]) for n in params)  # the stated difference


def _cli(args, kill_at=None):
    """`verl <args>` in a fresh interpreter (not forked from this process, which may hold threads of the
    asynchronous runs above); VERL_TEST_KILL_AT makes it SIGKILL itself at that point."""
    env = {**os.environ, **({"VERL_TEST_KILL_AT": kill_at} if kill_at else {})}
    return subprocess.run([sys.executable, "-m", "verl.cli", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_kill_during_an_asynchronous_step_then_resume(tmp_path, tiny_gpt2):
    """kill -9 right after step 2's checkpoint folder is complete (its pointers not yet moved), while the
    producer generates batch 3 ahead at staleness 1; --resume auto then logs every step exactly once."""
    run = tmp_path / "run"
    args = ["train", *small_overrides(tmp_path, **{**BASE, **ASYNC, "training.total_steps": 4,
                                                   "async_training.max_staleness": 1}),
            "--save_full_state", "--save_dir", str(run)]
    killed = _cli(args, kill_at="ckpt_renamed:2")  # step 2's checkpoint complete
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = _cli(args + ["--resume", "auto"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4], steps  # every step once
    assert json.loads((run / "run_state.json").read_text())["finished"] is True
