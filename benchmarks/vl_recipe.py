"""The vision-language recipe: does RL through the image path teach a blind model to count?

    python3 benchmarks/vl_recipe.py --device cuda --minutes 4 --out /tmp/h200_results/vl_recipe

Builds (once, cached) the hybrid LLaVA of verl/models/hybrid_vl.py (real SmolLM2-135M-Instruct text weights,
RANDOM vision tower and projector), writes the counting data (verl/data/counting_images.py: --train / --val
rows, --max_count), then runs `verl train examples/counting_vl_grpo.yaml training.max_minutes=MINUTES` in its
own process (algorithm_curves.run_algorithm: the same command line and metric reading). Held-out accuracy
is the run's own greedy validation (val/all/acc@1): before = step 0, after = the final validation; the
text-only baseline is always answering the most frequent held-out count (counting_meta.json). Writes
OUT/vl_recipe.{json,md}, OUT/vl_recipe.png (accuracy against training minutes and steps, the baseline as a
line), OUT/counting_meta.json and OUT/grpo/{metrics.jsonl,config.yaml,train.log}.
On a CPU (the test): --model tiny:llava --recipe examples/counting_vl_grpo_cpu.yaml --set training.total_steps=2.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import algorithm_curves  # noqa: E402
import common  # noqa: E402


def main(argv=None) -> int:
    from verl.data.counting_images import CountingTask, write_splits

    ap = common.arg_parser(__doc__, "device", out="benchmarks/results/vl_recipe")
    ap.add_argument("--recipe", default="examples/counting_vl_grpo.yaml")
    ap.add_argument("--model", default="hybrid", help="'hybrid' (built once from the fetched SmolLM2) or a model.name")
    ap.add_argument("--minutes", type=float, default=4.0, help="training.max_minutes")
    ap.add_argument("--train", type=int, default=4096, help="training rows")
    ap.add_argument("--val", type=int, default=256, help="held-out rows")
    ap.add_argument("--max_count", type=int, default=CountingTask.max_count)
    ap.add_argument("--timeout", type=int, default=600, help="seconds for the training process")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides for the run")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    info = common.machine_info(common.resolve_device(args.device))
    info["command"] = "python3 benchmarks/vl_recipe.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.model == "hybrid":
        from verl.models.hybrid_vl import hybrid_model_path

        try:
            args.model = hybrid_model_path()
        except RuntimeError as exc:
            print(f"vl_recipe: {exc}", file=sys.stderr)
            return 2
    data = os.path.join(args.out, "data")
    task = CountingTask(max_count=args.max_count)
    meta = write_splits(data, task, args.train, args.val)
    shutil.copy(os.path.join(data, "counting_meta.json"), args.out)
    baseline = meta["val"]["text_only_baseline_acc"]
    args.engine = None  # the recipe's
    args.set = [f"model.name={json.dumps(args.model)}",
                f"data.train_files=[{json.dumps(os.path.abspath(os.path.join(data, 'counting_train.jsonl')))}]",
                f"data.val_files=[{json.dumps(os.path.abspath(os.path.join(data, 'counting_val.jsonl')))}]",
                f"data.val_max_samples={args.val}", *args.set]
    row = algorithm_curves.run_algorithm(args, "grpo")
    shutil.rmtree(os.path.join(data, "images"), ignore_errors=True)  # regenerated from the seed; keep the jsonl
    row = {"recipe": args.recipe, "model": os.path.basename(args.model.rstrip("/")), "max_count": task.max_count,
           "text_only_acc": baseline, **{k: v for k, v in row.items() if k != "algorithm"}}
    key = row.get("val_key") or "val/all/acc@1"
    if row.get("curve"):  # where the best held-out accuracy was first reached: a later collapse shows against it
        best = next(c for c in row["curve"] if c["acc"] == row["acc_best"])
        row["best_step"], row["best_minutes"] = best["step"], round(best["train_s"] / 60, 2)
    algorithm_curves.plot([{"algorithm": "GRPO, hybrid LLaVA", "curve": row.get("curve")}],
                          os.path.join(args.out, "vl_recipe.png"), key, hline=(baseline, f"text-only prior ({baseline:.0%})"),
                          title="Counting squares: SmolLM2-135M text weights + a RANDOM vision tower, trained by RL only")
    cols = ["model", "minutes", "steps", "step_s_median", "text_only_acc", "acc_first", "acc_last", "acc_best",
            "best_step", "best_minutes", "wall_s", "error"]
    cols = [c for c in cols if row.get(c) is not None]
    notes = (f"{args.recipe}, {args.minutes} minutes of training.max_minutes; acc = {key} on {args.val} held-out "
             f"images (greedy exact count), acc_first at step 0 (before training), acc_last at the final validation, best_step / best_minutes where acc_best was first reached; "
             f"text_only_acc: always the most frequent held-out count. The model's vision tower and projector "
             f"started RANDOM (verl/models/hybrid_vl.py).")
    common.write_results(args.out, "vl_recipe", info, [row], cols, extra={"command": info["command"], "task": meta},
                         notes=notes)
    print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
    return 0 if "error" not in row else 1


if __name__ == "__main__":
    sys.exit(main())
