"""Seconds per step of finished training runs, side by side, over one window of steps: the median
of each stage's `timing_s/*` and the mean response length, read from each run's metrics.jsonl.
Two runs of one recipe on different engines compare fairly over the same early steps, before the
policy shortens its answers (on 2026-12-02 the vLLM run's responses fell from ~48 to ~24 tokens
after step 30, which the HF run, stopped at step 21, never reached).

    python benchmarks/run_steps.py benchmarks/results/h200/recipe_hf_2026-12-02_session10/sync \\
        benchmarks/results/h200/recipe_vllm_2026-12-02_session10/sync --first 2 --last 21

The first row is the baseline of the x_first column (its step seconds over each row's): above, HF
2.98 s and vLLM 0.962 s a step at 48.9 / 48.1 tokens a response, x_first 3.09.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import common

STAGES = ("step", "rollout", "old_log_prob", "update_actor", "update_weights")


def window_row(run_dir: str, first: int, last: int) -> dict:
    """Medians of timing_s/<stage> and the mean response_length/mean over steps first..last."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    steps = [r for r in rows if "timing_s/step" in r and first <= r["step"] <= last]
    if not steps:
        raise SystemExit(f"{run_dir}/metrics.jsonl: no training step between {first} and {last}")
    out = dict(run=run_dir, steps=len(steps),
               response_len=statistics.mean(r["response_length/mean"] for r in steps))
    for stage in STAGES:
        values = [r[f"timing_s/{stage}"] for r in steps if f"timing_s/{stage}" in r]
        out[f"{stage}_s"] = statistics.median(values) if values else None
    return out


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run folders holding metrics.jsonl")
    ap.add_argument("--first", type=int, default=2, help="first step of the window (step 1 pays the warm-up)")
    ap.add_argument("--last", type=int, default=10**9, help="last step of the window")
    args = ap.parse_args(argv)
    rows = [window_row(run, args.first, args.last) for run in args.runs]
    for r in rows:
        r["x_first"] = rows[0]["step_s"] / r["step_s"]
    columns = ["run", "steps", "response_len"] + [f"{s}_s" for s in STAGES] + ["x_first"]
    print(common.format_table(rows, columns))
    return rows


if __name__ == "__main__":
    main()
