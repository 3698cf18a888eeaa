"""Do they all learn? The same recipe trained with several algorithm presets for the same minutes each,
their held-out accuracy curves on one plot.

    python3 benchmarks/algorithm_curves.py --device cuda --engine vllm --minutes 2 \\
        --algorithms grpo gspo cispo dapo --out benchmarks/results/h200/algorithm_curves

Each algorithm is one `verl train RECIPE algorithm.name=NAME training.max_minutes=MINUTES` in its own
process (its own engine), one after another on the same machine; the recipe's other keys stay as they
are (a preset fills only the algorithm keys the recipe leaves unset: examples/arithmetic_grpo.yaml sets
kl_loss_coef alone, which the KL-free presets do not read). Minutes are training.max_minutes: validation
included, the process start and model load not. The plot's x axis is the run's own training seconds (the
sum of timing_s/step up to each validation), so an algorithm that steps slower (DAPO regenerates groups
without signal) shows it. Writes OUT/algorithm_curves.{json,md}, OUT/algorithm_curves.png and, per
algorithm, OUT/NAME/{metrics.jsonl,config.yaml,train.log}. A later call into the same --out adds its
algorithms to the earlier call's rows (same --minutes), so the table and plot hold them all.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def run_algorithm(args, name: str) -> dict:
    """One preset for args.minutes; its curve (training seconds, step, held-out accuracy) and figures."""
    row = run_recipe(args, name, [f"algorithm.name={name}"])
    return {"algorithm": row.pop("run"), **row}


def run_recipe(args, name: str, overrides: list, series: tuple = ()) -> dict:
    """args.recipe with `overrides` for args.minutes of training.max_minutes in a process of its own, kept
    under args.out/NAME; its curve (training seconds, step, held-out accuracy), figures and, per key of
    `series`, that metric's (step, value) pairs on the steps that logged it."""
    from verl.tracking.plot import pick_val_key, read_metrics

    run_dir = tempfile.mkdtemp(prefix=f"recipe-{name}-")
    keep = os.path.join(args.out, name)
    os.makedirs(keep, exist_ok=True)
    cmd = [sys.executable, "-m", "verl.cli", "train", args.recipe, *overrides,
           f"training.max_minutes={args.minutes}", f"device={args.device}", "logging.progress_bar=false",
           "logging.backends=[jsonl]", "--save_dir", run_dir, "--save_actor_only", *args.set]
    if args.engine:
        cmd.append(f"rollout.name={args.engine}")
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        log, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        log, rc = f"{exc.stdout or ''}{exc.stderr or ''}\ntimeout after {args.timeout} s", -1
    wall = round(time.perf_counter() - started, 1)
    with open(os.path.join(keep, "train.log"), "w") as fh:
        fh.write(log if isinstance(log, str) else log.decode(errors="replace"))
    for f in ("metrics.jsonl", "config.yaml"):
        if os.path.exists(os.path.join(run_dir, f)):
            shutil.copy(os.path.join(run_dir, f), keep)
    if rc != 0 or not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
        return {"run": name, "error": common.failure_summary(rc, log if isinstance(log, str) else "", "")}
    rows = read_metrics(run_dir)
    key = pick_val_key([rows])
    curve, seconds = [], 0.0
    step_s = []
    for r in rows:  # training rows carry timing_s/step; validation rows the held-out figure at that step
        if r.get("timing_s/step") is not None:
            seconds += r["timing_s/step"]
            step_s.append(r["timing_s/step"])
        if key and r.get(key) is not None:
            curve.append({"train_s": round(seconds, 3), "step": r["step"], "acc": r[key]})
    shutil.rmtree(run_dir, ignore_errors=True)
    logged = {k: [[r["step"], r[k]] for r in rows if r.get(k) is not None and "step" in r] for k in series}
    return {"run": name, "minutes": args.minutes, **({"series": logged} if series else {}), "steps": max((r["step"] for r in rows if "step" in r), default=0),
            "step_s_median": round(statistics.median(step_s), 3) if step_s else None, "val_key": key,
            "acc_first": curve[0]["acc"] if curve else None, "acc_last": curve[-1]["acc"] if curve else None,
            "acc_best": max(c["acc"] for c in curve) if curve else None, "wall_s": wall, "curve": curve}


def _earlier_rows(args) -> list:
    """Rows of an earlier call into args.out with the same recipe and minutes (error rows dropped)."""
    path = os.path.join(args.out, "algorithm_curves.json")
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        rows = json.load(fh).get("rows", [])
    return [r for r in rows if "error" not in r and r.get("minutes") == args.minutes]


def plot(rows: list, path: str, key: str, title: str = "Held-out accuracy, same recipe and minutes per algorithm",
         hline: tuple = None) -> None:
    """Accuracy against training minutes and steps, one line per row; hline (value, label): a dashed reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        if not r.get("curve"):
            continue
        t = [c["train_s"] / 60 for c in r["curve"]]
        label = r.get("algorithm", r.get("run"))
        by_time.plot(t, [c["acc"] for c in r["curve"]], marker="o", ms=3, label=label)
        by_step.plot([c["step"] for c in r["curve"]], [c["acc"] for c in r["curve"]], marker="o", ms=3,
                     label=label)
    by_time.set_xlabel("training minutes (sum of step times)")
    by_step.set_xlabel("step")
    for ax in (by_time, by_step):
        if hline is not None:
            ax.axhline(hline[0], color="gray", ls="--", label=hline[1])
        ax.set_ylabel(f"held-out {key}")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__, "device", out="benchmarks/results/algorithm_curves")
    ap.add_argument("--recipe", default="examples/arithmetic_grpo.yaml")
    ap.add_argument("--algorithms", nargs="+", default=["grpo", "gspo", "cispo", "dapo"])
    ap.add_argument("--minutes", type=float, default=2.0, help="training.max_minutes per algorithm")
    ap.add_argument("--engine", default=None, help="rollout.name (default: the recipe's)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per algorithm's process")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides for every run")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    info = common.machine_info(common.resolve_device(args.device))
    info["command"] = "python3 benchmarks/algorithm_curves.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = _earlier_rows(args)  # an earlier call into the same --out (one device call runs two algorithms)
    for name in args.algorithms:  # the table is rewritten after each: a call cut short keeps what it measured
        rows = [r for r in rows if r["algorithm"] != name]
        rows.append(run_algorithm(args, name))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "curve"}), flush=True)
        key = next((r["val_key"] for r in rows if r.get("val_key")), "accuracy")
        plot(rows, os.path.join(args.out, "algorithm_curves.png"), key)
        cols = ["algorithm", "minutes", "steps", "step_s_median", "acc_first", "acc_last", "acc_best", "wall_s", "error"]
        cols = [c for c in cols if c == "algorithm" or any(r.get(c) is not None for r in rows)]
        notes = (f"{args.recipe} on {args.engine or 'its engine'}, {args.minutes} minutes of training.max_minutes "
                 f"per algorithm, one process each, one after another; acc = {key} (greedy, the run's own "
                 f"validation every training.val_every steps); acc_first at step 0 (before training).")
        common.write_results(args.out, "algorithm_curves", info, rows, cols, extra={"command": info["command"]},
                             notes=notes)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
