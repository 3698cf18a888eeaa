"""Chaos tests through the CLI: a rank process or a vLLM engine process killed in the middle of a
step of `verl train` on Ray (2 CPU ranks, gloo). The run ends within a minute of the kill with one
line that names what died (group, call, rank, node, pid, log) and exit code 3; `--resume auto`
then continues from the last full checkpoint, and its result equals a run that was never killed.
With rollout.restart_on_failure the killed engine is started again once and the run goes on.

The kill comes from inside the driver (VERL_TEST_KILL_WORKER, verl/distributed/kill_hook.py): the
n-th time a call goes out to a worker group, right after it reached every rank, one rank's process
gets SIGKILL, so the call is in flight when its process dies. Each run is a fresh `python -m
verl.cli` process with its own local Ray instance (~30-60 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from conftest import small_overrides

pytestmark = pytest.mark.timeout(900)

STEPS = 3
# GRPO with a reference (KL loss): actor and reference are Ray worker groups of 2 ranks each.
RUN = {"training.total_steps": STEPS, "training.batch_size": 2, "rollout.n": 2, "training.mini_batch_size": 4,
       "training.micro_batch_size": 2, "algorithm.adv_estimator": "grpo", "algorithm.use_kl_loss": "true",
       "data.baseline_prompt": "null", "checkpoint.save_full_every": 1, "distributed.backend": "ray",
       "distributed.devices_per_node": 2, "distributed.num_cpus": 4}
VLLM = {"model.name": "tiny:llama", "rollout.name": "vllm", "distributed.rollout": "workers",
        "rollout.kv_cache_gb": 0.25}
BOUND_S = 60  # from the kill to the exit


def _train(tmp_path, tag, kill=None, extra=(), **over):
    """Run `verl train` to its end; (exit code, log text, seconds from the kill to the exit or None)."""
    log = tmp_path / f"{tag}.log"
    env = {k: v for k, v in os.environ.items() if k != "VERL_TEST_KILL_WORKER"}
    if kill:
        env["VERL_TEST_KILL_WORKER"] = kill
    args = small_overrides(tmp_path, **{**RUN, "checkpoint.save_dir": str(tmp_path / "run"), **over})
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "verl.cli", "train", *args, *extra], stdout=out,
                                stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path))
        killed_at, deadline = None, time.monotonic() + 600
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"{tag}: verl train did not end in 600 s; log:\n{log.read_text()[-3000:]}")
            if killed_at is None and "[chaos] SIGKILL" in log.read_text():
                killed_at = time.monotonic()
            time.sleep(0.1)
    after_kill = time.monotonic() - killed_at if killed_at is not None else None
    return proc.returncode, log.read_text(), after_kill


def _error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, lines
    return lines[0]


def _killed_pid(text: str) -> str:
    return re.search(r"\[chaos\] SIGKILL to \S+ rank \d+ \(pid (\d+)\)", text).group(1)


def _steps_logged(run_dir) -> list[int]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        return [json.loads(line)["step"] for line in fh if '"reward/mean"' in line]


def _final_weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(run_dir, "model.safetensors"))


def test_a_killed_rank_stops_the_run_within_a_minute_and_resume_loses_nothing(tmp_path):
    code, text, after_kill = _train(tmp_path, "killed", kill="actor.update:1:2")
    assert code == 3, text[-3000:]
    line = _error_line(text)
    # what died, in which call, where: the rank's pid (the one the hook killed), node and log
    assert f"actor.update: rank 1 died" in line and f"pid {_killed_pid(text)}" in line, line
    assert "node " in line and " log /" in line, line
    # and what is kept: step 1's full checkpoint (step 2 was cut short in its update)
    assert "the last full checkpoint" in line and "step_000001 is intact" in line and "--resume auto" in line, line
    assert after_kill < BOUND_S, f"{after_kill:.0f} s from the kill to the exit"
    run = tmp_path / "run"
    assert _steps_logged(run) == [1]

    code, text, _ = _train(tmp_path, "resumed", extra=["--resume", "auto"])
    assert code == 0, text[-3000:]
    assert "resuming from" in text and "step_000001 (step 1 of 3)" in text
    assert _steps_logged(run) == [1, 2, 3]  # each step once: step 2 trained again from step 1's state

    code, text, _ = _train(tmp_path, "uninterrupted", **{"checkpoint.save_dir": str(tmp_path / "whole")})
    assert code == 0, text[-3000:]
    resumed, whole = _final_weights(run), _final_weights(tmp_path / "whole")
    assert resumed.keys() == whole.keys()
    for name, value in whole.items():
        # the same computation on the same machine; a tolerance, not bit equality, for the gloo reductions
        assert torch.allclose(resumed[name], value, rtol=1e-5, atol=1e-7), name


def test_a_killed_vllm_engine_stops_the_run_and_restart_on_failure_goes_on(tmp_path):
    code, text, after_kill = _train(tmp_path, "killed", kill="rollout.generate:0:2", **VLLM)
    assert code == 3, text[-3000:]
    line = _error_line(text)
    assert line.startswith("error: vLLM engine process lost: rollout.generate: rank 0 died"), line
    assert f"pid {_killed_pid(text)}" in line and "step_000001 is intact" in line, line
    assert after_kill < BOUND_S, f"{after_kill:.0f} s from the kill to the exit"

    # The resumed run's engine is killed in its first generation (step 2): restarted once, the run goes on.
    code, text, _ = _train(tmp_path, "restarted", kill="rollout.generate:0:1", extra=["--resume", "auto"],
                           **VLLM, **{"rollout.restart_on_failure": "true"})
    assert code == 0, text[-3000:]
    assert "warning: vLLM engine process lost: rollout.generate: rank 0 died" in text
    assert re.search(r"rollout engines restarted in \d+ s; generate again", text)
    assert "error:" not in text
    assert _steps_logged(tmp_path / "run") == [1, 2, 3]


def test_restart_on_failure_is_refused_where_the_engine_is_in_the_trainers_process(tmp_path):
    args = small_overrides(tmp_path, **{"rollout.restart_on_failure": "true"})
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", *args], capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: rollout.restart_on_failure: restarts engines "
                                                           "that run in their own processes"), proc.stderr
