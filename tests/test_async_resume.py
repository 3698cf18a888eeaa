"""Resuming the asynchronous modes (docs/async.md, "Resuming"): a run stopped after its step-2
checkpoint, with batches drawn ahead by the producer (staleness 1 and 2, partial rollouts), and
resumed trains exactly the prompts the uninterrupted run trains at steps 3-4, each step once: nothing
counted twice or lost. Staleness 0 is bitwise (tests/test_async_training.py); above it the batches that
were in flight at the stop are generated again after the resume, with the restored (newer) weights,
so the weights after the resume are not the uninterrupted run's: that is the one stated difference.
kill -9 in the middle of step 3 of an asynchronous run, then --resume auto: every step once."""

import json
import signal

import pytest
import torch

from conftest import small_overrides
from test_async_training import BASE, _run_recording
from test_reliability_kill import _fork_cli
from verl import create_trainer, load_config

ASYNC = {"async_training.enable": "true", "rollout.hf_weight_copy": "true", "checkpoint.save_full_every": 2}


@pytest.mark.parametrize("extra", [
    {"async_training.max_staleness": 1},
    {"async_training.max_staleness": 2},
    {"async_training.max_staleness": 1, "async_training.partial_rollout": "true", "async_training.segment_tokens": 2},
], ids=["staleness1", "staleness2", "partial"])
def test_resume_trains_the_same_prompts_each_once(tmp_path, tiny_gpt2, extra):
    extra = {**ASYNC, **extra}
    whole, whole_params = _run_recording(tmp_path, "whole", 4, **extra)
    _run_recording(tmp_path, "parts", 2, **extra)
    cfg = load_config(None, small_overrides(tmp_path / "parts", **{**BASE, "training.total_steps": 4, **extra,
                                                                    "checkpoint.resume": "auto"}))
    trainer = create_trainer(cfg)
    assert trainer.global_step == 2
    resumed = []
    try:
        for _ in range(2):
            trainer.step()
            resumed.append(trainer._last_batch.prompt_text)
        params = {n: p.detach() for n, p in trainer.actor.model.named_parameters()}
    finally:
        trainer.lifecycle.close()
    assert resumed == [whole[2]["prompts"], whole[3]["prompts"]]  # the same prompts, in order, once each
    # the first batch after the resume is generated with the restored weights: staleness 0 there
    steps = [json.loads(line)["step"] for line in open(tmp_path / "parts" / "out" / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4]
    assert any(not torch.equal(params[n], whole_params[n]) for n in params)  # the stated difference


def test_kill_during_an_asynchronous_step_then_resume(tmp_path, tiny_gpt2):
    """kill -9 right after step 2's checkpoint folder is complete (its pointers not yet moved), while the
    producer generates batch 3 ahead at staleness 1; --resume auto then logs every step exactly once."""
    run = tmp_path / "run"
    args = ["train", *small_overrides(tmp_path, **{**BASE, **ASYNC, "training.total_steps": 4,
                                                   "async_training.max_staleness": 1}),
            "--save_full_state", "--save_dir", str(run)]
    code = _fork_cli(args, tmp_path / "killed.log", kill_at="ckpt_renamed:2")  # step 2's checkpoint complete
    assert code == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    code = _fork_cli(args + ["--resume", "auto"], tmp_path / "resumed.log")
    out = (tmp_path / "resumed.log").read_text()
    assert code == 0, out[-3000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4], steps  # every step once
    assert json.loads((run / "run_state.json").read_text())["finished"] is True
