"""Does FP8 rollout hurt learning? The same recipe trained for the same minutes with the engine in bf16 and with
rollout.quantization: fp8, their held-out accuracy curves and the engine-vs-actor mismatch of each step.

    python3 benchmarks/fp8_learning.py --device cuda --minutes 4 --out benchmarks/results/h100/fp8_learning

Each arm is one `verl train RECIPE rollout.name=ENGINE ARM'S KEYS training.max_minutes=MINUTES` in its own
process (its own engine), one after another on the same machine, each with its own defaults: the fp8 arm's
include the truncated importance correction (rollout.tis_cap 2.0) and a mismatch check on every step, the bf16
arm checks every rollout.logprob_check_every steps (10). The seed, data order and validation set are the same.

The verdict is the issue's: the fp8 arm's last held-out accuracy at least the bf16 arm's minus 3 points
(--tolerance). One seed each: with the recipe's 400 held-out prompts one accuracy's standard error is about
2.5 points, so read a miss near the line as noise until a second run agrees.

Writes OUT/fp8_learning.{json,md}, OUT/fp8_learning.png (held-out accuracy by training minutes and by step) and
OUT/fp8_mismatch.png (rollout/logprob_diff, rollout/engine_kl and rollout/is_ratio_p999 by step, one line an
arm), and per arm OUT/NAME/{metrics.jsonl,config.yaml,train.log}. --arm NAME=KEY=VALUE,KEY=VALUE replaces the
two arms (the CPU test compares two arms without FP8, which needs vLLM on a CUDA GPU).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from algorithm_curves import plot, run_recipe  # noqa: E402

ARMS = {"bf16": [], "fp8": ["rollout.quantization=fp8"]}  # the first arm is the reference
MISMATCH_KEYS = ("rollout/logprob_diff", "rollout/engine_kl", "rollout/is_ratio_p999")


def parse_arm(text: str) -> tuple:
    """'fp8=rollout.quantization=fp8,rollout.tis_cap=0' -> ('fp8', ['rollout.quantization=fp8', ...]);
    'bf16=' -> ('bf16', [])."""
    name, _, keys = text.partition("=")
    if not name:
        raise SystemExit(f"--arm {text!r}: give NAME=KEY=VALUE[,KEY=VALUE] (NAME= for no keys)")
    return name, [k for k in keys.split(",") if k]


def verdict(rows: list, tolerance: float) -> dict:
    """The last arm against the first: gap = acc_last(last) - acc_last(first), in points (x100); within when
    gap >= -tolerance * 100 (an arm that learns better is within). None where either arm has no accuracy."""
    ref, arm = rows[0], rows[-1]
    if ref.get("acc_last") is None or arm.get("acc_last") is None:
        return {"gap_points": None, "within": None}
    gap = round(100 * (arm["acc_last"] - ref["acc_last"]), 2)
    return {"reference": ref["run"], "arm": arm["run"], "gap_points": gap, "tolerance_points": 100 * tolerance,
            "within": gap >= -100 * tolerance}


def plot_mismatch(rows: list, path: str) -> None:
    """One panel per mismatch key, that key by step, one line per arm (points where the step logged it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MISMATCH_KEYS), figsize=(4.2 * len(MISMATCH_KEYS), 3.6))
    for ax, key in zip(axes, MISMATCH_KEYS):
        for r in rows:
            pts = (r.get("series") or {}).get(key) or []
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=2, label=r["run"])
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Engine vs actor on the sampled tokens, each step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summarize(row: dict) -> dict:
    """A row's mismatch series cut to its mean and largest value for the table."""
    out = {k: v for k, v in row.items() if k not in ("curve", "series")}
    for key in MISMATCH_KEYS:
        vals = [p[1] for p in (row.get("series") or {}).get(key) or []]
        short = key.split("/")[1]
        out[f"{short}_mean"] = round(sum(vals) / len(vals), 4) if vals else None
        out[f"{short}_max"] = round(max(vals), 4) if vals else None
    return out


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__, "device", out="benchmarks/results/fp8_learning")
    ap.add_argument("--recipe", default="examples/arithmetic_grpo.yaml")
    ap.add_argument("--minutes", type=float, default=4.0, help="training.max_minutes per arm")
    ap.add_argument("--engine", default="vllm", help="rollout.name (fp8 runs on vllm)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per arm's process")
    ap.add_argument("--tolerance", type=float, default=0.03, help="accuracy the last arm may lose (0.03: 3 points)")
    ap.add_argument("--arm", action="append", default=None, metavar="NAME=KEY=VALUE,...",
                    help="replaces the two arms (bf16=, fp8=rollout.quantization=fp8); the first is the reference")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides for every arm")
    args = ap.parse_args(argv)
    arms = dict(parse_arm(a) for a in args.arm) if args.arm else ARMS
    os.makedirs(args.out, exist_ok=True)
    info = common.machine_info(common.resolve_device(args.device))
    info["command"] = "python3 benchmarks/fp8_learning.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = []
    for name, keys in arms.items():  # the report is rewritten after each arm: a call cut short keeps the first
        rows.append(run_recipe(args, name, [f"rollout.name={args.engine}", *keys], series=MISMATCH_KEYS))
        print(summarize(rows[-1]), flush=True)
        key = next((r["val_key"] for r in rows if r.get("val_key")), "accuracy")
        plot(rows, os.path.join(args.out, "fp8_learning.png"), key,
             title=f"Held-out accuracy, {args.minutes} minutes per arm: engine in bf16 vs FP8")
        plot_mismatch(rows, os.path.join(args.out, "fp8_mismatch.png"))
        table = [summarize(r) for r in rows]
        cols = ["run", "minutes", "steps", "step_s_median", "acc_first", "acc_last", "acc_best",
                "logprob_diff_mean", "logprob_diff_max", "engine_kl_mean", "is_ratio_p999_max", "wall_s", "error"]
        cols = [c for c in cols if c == "run" or any(r.get(c) is not None for r in table)]
        result = verdict(rows, args.tolerance) if len(rows) == len(arms) else {}
        notes = (f"{args.recipe} on {args.engine}, {args.minutes} minutes of training.max_minutes per arm, one "
                 f"process each, one after another, each arm at its defaults; acc = {key} (greedy, the run's own "
                 f"validation every training.val_every steps). Mismatch columns: over the steps that measured it. "
                 + (f"Last arm minus first, last accuracy: {result['gap_points']} points (within "
                    f"{100 * args.tolerance:g}: {result['within']})." if result.get("gap_points") is not None else ""))
        common.write_results(args.out, "fp8_learning", info, table, cols,
                             extra={"command": info["command"], "verdict": result,
                                    "curves": {r["run"]: r.get("curve") for r in rows},
                                    "series": {r["run"]: r.get("series") for r in rows}}, notes=notes)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
