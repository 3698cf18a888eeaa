"""benchmarks/algorithm_curves.py: two presets train the quickstart for a few steps each; the table,
the curves (training seconds summed from the steps' timings) and a second call's merge into them."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import algorithm_curves  # noqa: E402

ARGS = ["--device", "cpu", "--recipe", "examples/quickstart.yaml", "--minutes", "2",
        "--set", "training.total_steps=2", "training.val_every=1", "rollout.n=4", "rollout.max_new_tokens=6"]


def test_two_presets_then_a_third_added_by_a_later_call(tmp_path):
    out = str(tmp_path / "curves")
    assert algorithm_curves.main(ARGS + ["--algorithms", "grpo", "cispo", "--out", out]) == 0
    rows = json.load(open(os.path.join(out, "algorithm_curves.json")))["rows"]
    assert [r["algorithm"] for r in rows] == ["grpo", "cispo"]
    for r in rows:
        # validation at steps 0, 1, 2; the x axis is the steps' own seconds: 0 before the first step, then rising
        assert [c["step"] for c in r["curve"]] == [0, 1, 2] and r["steps"] == 2
        assert r["curve"][0]["train_s"] == 0 and r["curve"][2]["train_s"] >= r["curve"][1]["train_s"] > 0
        assert r["acc_first"] == r["curve"][0]["acc"] and 0 <= r["acc_best"] <= 1
        assert os.path.exists(os.path.join(out, r["algorithm"], "metrics.jsonl"))
        cfg = open(os.path.join(out, r["algorithm"], "config.yaml")).read()
        assert f"policy_loss: {'cispo' if r['algorithm'] == 'cispo' else 'ppo'}" in cfg
    assert os.path.getsize(os.path.join(out, "algorithm_curves.png")) > 0
    # a later call into the same folder (the next device command) adds its algorithm to the same table and plot
    assert algorithm_curves.main(ARGS + ["--algorithms", "sapo", "--out", out]) == 0
    rows = json.load(open(os.path.join(out, "algorithm_curves.json")))["rows"]
    assert [r["algorithm"] for r in rows] == ["grpo", "cispo", "sapo"]
