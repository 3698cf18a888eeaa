"""The trainer with the vLLM backend (CPU build of vLLM), each run in its own process:
vLLM keeps one engine per process."""

import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_seed_script_with_vllm_rollout_runs_unchanged(tmp_path, tiny_gpt2):
    """The seed's config keeps `rollout.name: vllm`; only the model points at a local folder."""
    cfg = yaml.safe_load(open(os.path.join(ROOT, "examples", "config_gpt2.yaml")))
    assert cfg["rollout"]["name"] == "vllm"
    cfg["model"]["name"] = tiny_gpt2
    cfg["training"].update(total_steps=11, batch_size=4)
    cfg["rollout"]["max_new_tokens"] = 6
    cfg["rollout"]["logprob_check_every"] = 1  # the stale-weights check after every sync (default: every 10th)
    cfg["logging"] = {"backends": ["jsonl"], "progress_bar": False}
    (tmp_path / "config_gpt2.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_gpt2.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Step 0: reward=" in proc.stdout and "Step 10: reward=" in proc.stdout
    out = tmp_path / "outputs" / f"{os.path.basename(tiny_gpt2)}-ppo"
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    # The engine received the actor's weights after every update: its log-probs of the
    # sampled tokens agree with the actor's recomputation (a stale engine gives ~0.1-1).
    diffs = [r["rollout/logprob_diff"] for r in rows if r.get("rollout/logprob_diff") is not None]
    assert len(diffs) == 11 and max(diffs) < 0.02, diffs
    assert all(r["timing_s/update_weights"] > 0 for r in rows if "timing_s/update_weights" in r)


def _grpo_rows(tmp_path, check_every: int) -> list[dict]:
    """Three GRPO steps of tiny:qwen2 on vLLM's CPU backend through the CLI, with
    rollout.logprob_check_every `check_every`: the metrics rows."""
    out = tmp_path / "grpo"
    proc = subprocess.run(
        [sys.executable, "-m", "verl.cli", "train", "model.name=tiny:qwen2", "rollout.name=vllm",
         "algorithm.name=grpo", "training.total_steps=3", "training.batch_size=4", "training.micro_batch_size=8",
         "rollout.max_new_tokens=8", f"rollout.logprob_check_every={check_every}", "logging.backends=[jsonl]",
         "logging.progress_bar=false", "device=cpu", "--save_dir", str(out)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)  # not in the repo
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def test_grpo_steps_with_vllm_backend(tmp_path, tiny_qwen2):
    rows = _grpo_rows(tmp_path, check_every=1)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["reward/mean"] is not None and r["rollout/logprob_diff"] < 0.02


def test_engine_log_probs_on_the_check_steps_only(tmp_path, tiny_qwen2):
    """rollout.logprob_check_every: 2 -> the vLLM engine reports its log-probs on steps 1 and 3 (the
    stale-weights check, rollout/logprob_diff) and skips them on step 2, where nothing reads them."""
    rows = _grpo_rows(tmp_path, check_every=2)
    checked = [r["step"] for r in rows if r.get("rollout/logprob_diff") is not None]
    assert checked == [1, 3], checked
    assert all(r["rollout/logprob_diff"] < 0.02 for r in rows if r["step"] in checked)
    assert all(r["reward/mean"] is not None for r in rows)
