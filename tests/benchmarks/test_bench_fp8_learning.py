"""benchmarks/fp8_learning.py: two arms of one recipe for a few steps each (on the CPU without FP8, which needs
vLLM on a CUDA GPU: the second arm turns on what fp8 turns on besides the engine's weights); the curves, the
per-step mismatch series, the plots and the verdict."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import fp8_learning  # noqa: E402


def test_the_verdict_is_the_last_arms_last_accuracy_against_the_firsts_minus_the_tolerance():
    # 0.47 - 0.50 = -3.0 points: on the line, within; 0.469 - 0.50 = -3.1: outside; better is always within
    rows = [{"run": "bf16", "acc_last": 0.50}, {"run": "fp8", "acc_last": 0.47}]
    assert fp8_learning.verdict(rows, 0.03) == {"reference": "bf16", "arm": "fp8", "gap_points": -3.0,
                                                "tolerance_points": 3.0, "within": True}
    rows[1]["acc_last"] = 0.469
    assert fp8_learning.verdict(rows, 0.03)["gap_points"] == -3.1 and not fp8_learning.verdict(rows, 0.03)["within"]
    rows[1]["acc_last"] = 0.62
    assert fp8_learning.verdict(rows, 0.03)["within"]
    assert fp8_learning.verdict([{"run": "a", "acc_last": None}, rows[1]], 0.03)["within"] is None


def test_an_arm_is_a_name_and_its_keys():
    assert fp8_learning.parse_arm("fp8=rollout.quantization=fp8,rollout.tis_cap=0") == (
        "fp8", ["rollout.quantization=fp8", "rollout.tis_cap=0"])
    assert fp8_learning.parse_arm("bf16=") == ("bf16", [])
    with pytest.raises(SystemExit):
        fp8_learning.parse_arm("=rollout.tis_cap=2")


def test_two_arms_train_the_quickstart_and_report_curves_mismatch_and_verdict(tmp_path):
    out = str(tmp_path / "fp8")
    args = ["--device", "cpu", "--recipe", "examples/quickstart.yaml", "--engine", "hf", "--minutes", "2",
            "--arm", "base=", "--arm", "corrected=rollout.tis_cap=2.0,rollout.logprob_check_every=1",
            "--set", "training.total_steps=2", "training.val_every=1", "rollout.n=4", "rollout.max_new_tokens=6",
            "--out", out]
    assert fp8_learning.main(args) == 0
    report = json.load(open(os.path.join(out, "fp8_learning.json")))
    rows = report["rows"]
    assert [r["run"] for r in rows] == ["base", "corrected"]
    for r in rows:
        assert r["steps"] == 2 and 0 <= r["acc_last"] <= 1
        # the HF engine reports its log-probs on every step: both steps carry a mismatch, a mean absolute
        # log-prob gap (>= 0) and a ratio quantile (> 0)
        series = report["series"][r["run"]]
        assert [p[0] for p in series["rollout/logprob_diff"]] == [1, 2]
        assert all(p[1] >= 0 for p in series["rollout/logprob_diff"])
        assert all(p[1] > 0 for p in series["rollout/is_ratio_p999"])
        assert r["logprob_diff_max"] == round(max(p[1] for p in series["rollout/logprob_diff"]), 4)
        assert [c["step"] for c in report["curves"][r["run"]]] == [0, 1, 2]
        assert os.path.exists(os.path.join(out, r["run"], "metrics.jsonl"))
    assert "tis_cap: 2.0" in open(os.path.join(out, "corrected", "config.yaml")).read()
    want = round(100 * (rows[1]["acc_last"] - rows[0]["acc_last"]), 2)
    assert report["verdict"]["gap_points"] == want and report["verdict"]["within"] == (want >= -3.0)
    for png in ("fp8_learning.png", "fp8_mismatch.png"):
        assert os.path.getsize(os.path.join(out, png)) > 0
