"""CLI: one-line errors with exit code 2 for bad input; tracebacks only with --debug."""

import subprocess
import sys


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "verl.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_version():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip()


def test_unknown_key_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("training:\n  totl_steps: 3\n")
    proc = run("train", str(cfg))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "training.totl_steps" in lines[0] and "total_steps" in lines[0]
    assert "Traceback" not in proc.stderr


def test_debug_shows_traceback(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("training:\n  totl_steps: 3\n")
    proc = run("train", str(cfg), "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_bad_override_and_missing_model(tmp_path):
    proc = run("train", "training.batch_size=3", "training.micro_batch_size=2")
    assert proc.returncode == 2 and "training.micro_batch_size" in proc.stderr
    proc = run("train", f"model.name={tmp_path}/nope", f"checkpoint.save_dir={tmp_path}/o")
    assert proc.returncode == 2 and "model.name" in proc.stderr and "does not exist" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_train_runs_and_saves(tmp_path, tiny_gpt2):
    out = tmp_path / "run"
    proc = run("train", "training.total_steps=2", "training.batch_size=2", "training.micro_batch_size=2",
               "rollout.max_new_tokens=4", "logging.progress_bar=false", "--save_dir", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "model.safetensors").exists() and (out / "metrics.jsonl").exists()
    assert "final: reward=" in proc.stdout
