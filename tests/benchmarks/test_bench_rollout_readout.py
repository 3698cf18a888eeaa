"""benchmarks/rollout_readout.py runs on the CPU and times each part of verl's work after an engine call."""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import rollout_readout  # noqa: E402


def test_rollout_readout_times_every_part_on_small_sizes(tmp_path):
    out = tmp_path / "readout.json"
    assert rollout_readout.main(["--sequences", "4", "--tokens", "8", "--repeats", "1", "--out", str(out)]) == 0
    rows = json.load(open(out))["rows"]
    parts = [r["part"] for r in rows]
    assert parts[0].startswith("read SGLang results") and parts[-1].startswith("total"), parts
    assert len(rows) == 6 and all(r["sequences"] == 4 and r["tokens"] == 32 and r["seconds"] >= 0 for r in rows)
    assert any("torch's ops" in p for p in parts), parts
    assert rows[-1]["seconds"] == round(rows[0]["seconds"] + rows[1]["seconds"], 4)
    assert rows[-1]["median_s"] == round(rows[0]["median_s"] + rows[1]["median_s"], 4)
    assert all(r["median_s"] >= r["seconds"] for r in rows[:-1])  # a median is never below the best


def test_busy_neighbours_spin_and_are_stopped(tmp_path):
    procs = rollout_readout.busy_neighbours(1)
    try:
        assert len(procs) == 1 and procs[0].is_alive()
    finally:
        for p in procs:
            p.terminate()
            p.join(timeout=5)
    assert not procs[0].is_alive()
    out = tmp_path / "busy.json"
    assert rollout_readout.main(["--sequences", "2", "--tokens", "4", "--repeats", "1", "--busy", "1",
                                 "--out", str(out)]) == 0
    assert "1 busy-spinning neighbour" in (tmp_path / "busy.md").read_text()


def test_the_torch_ops_baseline_builds_the_same_tensors_as_assemble_rollout():
    import torch

    from verl.batch import Batch
    from verl.rollout.base import assemble_rollout

    tok = rollout_readout.synthetic_tokenizer(1000)
    responses, log_probs = [[5, 6, 7], [8]], [[-0.5, -0.25, -1.0], [-2.0]]
    prompts = Batch(input_ids=torch.tensor([[0, 3], [4, 9]]), attention_mask=torch.tensor([[0, 1], [1, 1]]))
    ids, pos, logp, mask, _ = rollout_readout.assemble_with_torch_ops(prompts, responses, log_probs, tok)
    batch = assemble_rollout(prompts, responses, log_probs, tok, 8, finished=[False, False])
    # hand-derived: row 0 = pad prompt, 3 | 5 6 7 -> positions 0 0 1 2 3; row 1 = 4 9 | 8 pad -> 0 1 2 0
    assert batch.position_ids.tolist() == pos.tolist() == [[0, 0, 1, 2, 3], [0, 1, 2, 0, 0]]
    assert batch.input_ids[:, :3].tolist() == ids[:, :3].tolist() == [[0, 3, 5], [4, 9, 8]]
    # the log-probs sit where their tokens do, 0 on padding; the mask marks the generated tokens
    assert batch.rollout_log_probs.tolist() == logp.tolist() == [[-0.5, -0.25, -1.0], [-2.0, 0.0, 0.0]]
    assert batch.response_mask.tolist() == mask.tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]


def test_synthetic_results_read_back_as_their_own_tokens():
    results = rollout_readout.sglang_results(3, 5, vocab=1000)
    for i, r in enumerate(results):
        toks, lps, finished = rollout_readout.response_of(r, i)
        assert toks == r["output_ids"] and len(lps) == 5 and all(lp <= 0 for lp in lps) and not finished
