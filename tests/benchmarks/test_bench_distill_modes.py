"""benchmarks/distill_modes.py on tiny models: a pruned student, each loss mode's run, the table and its JSON."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import distill_modes  # noqa: E402


def test_the_summary_columns_by_hand():
    # last 2 of [2, 1, 3]: (1 + 3) / 2 = 2.0; the unchanged row's last 2: (2 + 2) / 2 = 2.0, so +0%;
    # the other row's last 2: (0.5 + 1.5) / 2 = 1.0, half of 2.0: -50%
    results = {"unchanged": {"kl": [2.0, 2.0, 2.0], "seconds": 1.0},
               "policy_gradient_k1": {"kl": [2.0, 0.5, 1.5], "seconds": 2.0},
               "direct_k3": {"kl": [2.0, 1.0, 3.0], "seconds": 3.0}}
    lines = distill_modes.table(results, last=2).splitlines()
    assert lines[0].startswith("| mode | 1 | 2 | 3 | last 2 | vs unchanged |")
    assert lines[2] == "| unchanged | 2.00 | 2.00 | 2.00 | 2.00 | +0% | 1.0 |"
    assert lines[3] == "| policy_gradient_k1 | 2.00 | 0.50 | 1.50 | 1.00 | -50% | 2.0 |"
    assert lines[4] == "| direct_k3 | 2.00 | 1.00 | 3.00 | 2.00 | +0% | 3.0 |"


@pytest.mark.timeout(600)
def test_each_mode_trains_from_one_pruned_student(tmp_path):
    from verl.models.tiny import build_tiny_model

    teacher = build_tiny_model("llama", str(tmp_path / "teacher"), layers=3, pretrain_steps=50)
    out = str(tmp_path / "modes")
    argv = ["--teacher", teacher, "--layers", "2", "--steps", "2", "--batch", "2", "--n", "2", "--last", "1",
            "--lr", "1e-3", "--out", out, "--set", "rollout.max_new_tokens=6", "data.baseline_prompt=null",
            # one optimizer step a step: the first step's KL is then measured before any update in every row
            "training.mini_batch_size=4", "training.micro_batch_size=4"]
    assert distill_modes.main(argv) == 0
    results = json.load(open(os.path.join(out, "distill_modes.json")))["results"]
    assert list(results) == ["policy_gradient_k1", "direct_k3", "unchanged"]
    first = [r["kl"][0] for r in results.values()]
    assert all(len(r["kl"]) == 2 for r in results.values())
    # the first step's samples come from the one pruned student on the same prompts with the same seed
    assert max(first) - min(first) < 1e-3 * max(first) and min(first) > 0, first
    # lr 1e-12 leaves the student where it started: its KL to its start stays at zero
    assert abs(results["unchanged"]["kl_to_start"][-1]) < 1e-4
    assert results["policy_gradient_k1"]["kl_to_start"][-1] > 1e-4  # the learning rows move
    report = open(os.path.join(out, "distill_modes.md")).read()
    assert "| unchanged |" in report and "last 1" in report
