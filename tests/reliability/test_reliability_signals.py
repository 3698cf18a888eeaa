"""SIGTERM/SIGINT: the current step finishes (or, caught in its generation, is abandoned), the
full state of the last completed step is saved, exit 0, and
`--resume auto` completes the run with a metrics log that has every step exactly once.
A second Ctrl-C exits at once."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import small_overrides


def _verl(args, **kw):
    return subprocess.Popen([sys.executable, "-m", "verl.cli", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_sigterm_saves_full_state_then_resume_completes(tmp_path, tiny_gpt2):
    out = tmp_path / "run"
    args = small_overrides(tmp_path, **{"training.total_steps": 5, "training.batch_size": 2,
                                        "rollout.max_new_tokens": 4, "checkpoint.save_dir": str(out)})
    proc = _verl(args)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().strip():
            break  # the first step is logged
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert "SIGTERM received" in stderr
    # after a step's update, or during the next step's generation (abandoned: it updated nothing yet)
    assert ("stopped by SIGTERM after step" in stdout and "full state saved to" in stdout
            or "that step was abandoned; the full state after step" in stdout), stdout[-2000:]
    latest = (out / "checkpoints" / "latest_full").read_text().strip()
    state = json.loads((out / "checkpoints" / latest / "trainer_state.json").read_text())
    stopped_at = state["global_step"]
    assert 1 <= stopped_at < 5 and state["reason"] == "signal SIGTERM"
    assert {"actor", "critic", "optim", "rng.pt", "manifest.json"} <= set(os.listdir(out / "checkpoints" / latest))
    assert not (out / "run_state.json").exists()  # not finished

    proc = _verl(args + ["--resume", "auto"])
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert "resuming from" in stdout and f"(step {stopped_at} of 5)" in stdout
    assert "training finished at step 5" in stdout
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]  # continued, no duplicated or missing steps
    assert json.loads((out / "run_state.json").read_text())["finished"] is True


CHILD = textwrap.dedent("""
    import time
    from verl.signals import GracefulStop, stop_requested
    with GracefulStop():
        print("ready", flush=True)
        while not stop_requested():
            time.sleep(0.01)
        print("requested", stop_requested(), flush=True)
        time.sleep(60)  # a long save: the second Ctrl-C must not wait for it
""")


def test_second_ctrl_c_exits_at_once(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() == "requested SIGINT"
    start = time.time()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    assert proc.returncode == 130 and time.time() - start < 10
    assert "again: exiting now" in proc.stderr.read()


def test_a_stop_during_a_long_generation_abandons_it_and_saves_the_last_step(tmp_path, tiny_gpt2):
    """A stop request arriving while step 2 generates (64 tokens at 30 ms a token here, ~2 s a row
    chunk, standing in for a real model's minutes): generation ends at the next token, the step is
    abandoned before its update, and the full state after step 1 is saved; the stop takes well
    under the 2 s the generation alone would have taken."""
    import pytest
    import torch

    from verl import create_trainer, load_config
    from verl.signals import GracefulStop, StopTraining, request_stop

    cfg = load_config(None, small_overrides(tmp_path, **{
        "training.total_steps": 3, "training.batch_size": 2, "rollout.max_new_tokens": 64,
        "rollout.name": "hf", "checkpoint.save_dir": str(tmp_path / "run")}))
    trainer = create_trainer(cfg)
    with GracefulStop(grace_s=60):
        trainer.step()
        after_step_1 = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
        model = trainer.rollout.model
        real_forward = model.forward
        calls = {"n": 0}

        def slow_forward(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                request_stop("SIGTERM")
            time.sleep(0.03)
            return real_forward(*args, **kwargs)

        model.forward = slow_forward
        started = time.monotonic()
        with pytest.raises(StopTraining) as stopped:
            trainer.train()
        took = time.monotonic() - started
    assert "during generation of step 2 of 3; that step was abandoned" in str(stopped.value), str(stopped.value)
    assert "full state after step 1 is saved" in str(stopped.value)
    assert calls["n"] <= 5 and took < 2.0, (calls["n"], took)  # stopped at the next token, not after 64
    latest = (tmp_path / "run" / "checkpoints" / "latest_full").read_text().strip()
    assert latest == "step_000001"
    for n, p in trainer.actor.model.named_parameters():
        assert torch.equal(p, after_step_1[n]), n  # no update of the abandoned step
