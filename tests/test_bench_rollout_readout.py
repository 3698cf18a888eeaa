"""benchmarks/rollout_readout.py runs on the CPU and times each part of verl's work after an engine call."""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import rollout_readout  # noqa: E402


def test_rollout_readout_times_every_part_on_small_sizes(tmp_path):
    out = tmp_path / "readout.json"
    assert rollout_readout.main(["--sequences", "4", "--tokens", "8", "--repeats", "1", "--out", str(out)]) == 0
    rows = json.load(open(out))["rows"]
    parts = [r["part"] for r in rows]
    assert parts[0].startswith("read SGLang results") and parts[-1].startswith("total"), parts
    assert len(rows) == 5 and all(r["sequences"] == 4 and r["tokens"] == 32 and r["seconds"] >= 0 for r in rows)
    assert rows[-1]["seconds"] == round(rows[0]["seconds"] + rows[1]["seconds"], 4)


def test_synthetic_results_read_back_as_their_own_tokens():
    results = rollout_readout.sglang_results(3, 5, vocab=1000)
    for i, r in enumerate(results):
        toks, lps, finished = rollout_readout.response_of(r, i)
        assert toks == r["output_ids"] and len(lps) == 5 and all(lp <= 0 for lp in lps) and not finished
