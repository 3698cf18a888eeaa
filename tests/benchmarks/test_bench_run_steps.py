"""benchmarks/run_steps.py: per-stage medians over a step window of finished runs, checked on two
hand-written metrics.jsonl files."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import run_steps  # noqa: E402


def write_run(folder, steps):
    os.makedirs(folder)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 0, "val/all/acc@1": 0.1}) + "\n")  # validation rows carry no timing
        for step, seconds, rollout, length in steps:
            f.write(json.dumps({"step": step, "timing_s/step": seconds, "timing_s/rollout": rollout,
                                "response_length/mean": length}) + "\n")
    return str(folder)


def test_medians_over_the_window_and_the_ratio_to_the_first_run(tmp_path, capsys):
    # slow: steps 2-4 take 3, 5, 4 s (median 4; step 1's 30 s warm-up and step 5 lie outside the window)
    slow = write_run(tmp_path / "slow", [(1, 30.0, 29.0, 10), (2, 3.0, 2.0, 40), (3, 5.0, 4.0, 50), (4, 4.0, 3.0, 60),
                                         (5, 1.0, 0.5, 20)])
    # fast: 1, 2, 1 s -> median 1; 4 / 1 = 4x the first run
    fast = write_run(tmp_path / "fast", [(2, 1.0, 0.4, 30), (3, 2.0, 0.6, 30), (4, 1.0, 0.5, 36)])
    rows = run_steps.main([slow, fast, "--first", "2", "--last", "4"])
    assert [r["steps"] for r in rows] == [3, 3]
    assert rows[0]["step_s"] == 4.0 and rows[0]["rollout_s"] == 3.0 and rows[0]["response_len"] == 50
    assert rows[1]["step_s"] == 1.0 and rows[1]["rollout_s"] == 0.5 and rows[1]["response_len"] == 32
    assert rows[0]["x_first"] == 1.0 and rows[1]["x_first"] == 4.0
    assert rows[0]["update_actor_s"] is None  # a stage the run never logged
    assert "x_first" in capsys.readouterr().out


def test_an_empty_window_names_the_file(tmp_path):
    run = write_run(tmp_path / "r", [(1, 2.0, 1.0, 10)])
    with pytest.raises(SystemExit, match="r/metrics.jsonl: no training step between 5 and 9"):
        run_steps.main([run, "--first", "5", "--last", "9"])
