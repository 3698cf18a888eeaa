"""SIGTERM/SIGINT: the current step finishes, the full state is saved, exit 0, and
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
    assert "stopped by SIGTERM after step" in stdout and "full state saved to" in stdout
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
