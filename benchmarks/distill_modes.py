"""On-policy distillation's loss modes with real weights, side by side: the student's KL to the teacher per step.

The student is the teacher's first --layers decoder layers (benchmarks/distill_student.py), distilled back
towards the whole teacher on examples/arithmetic_grpo.yaml's prompts without the task reward. Rows:

    policy_gradient_k1   the default: advantage log p_teacher - log p_student through the clipped policy gradient,
                         whose expected gradient is that of KL(student || teacher)
    direct_k3            real verl's default: k3 minimised directly (the forward KL's gradient on the student's
                         tokens)
    unchanged            the student left as it is (training.lr 1e-12): the KL without learning

The figure is `distillation/kl_k3`, the k3 estimate of KL(student || teacher) in nats a token on each step's own
samples, taken in the update's forward passes (a step here has two optimizer steps, so its second half is
measured after the first). Every row draws the same prompts in the same order (the data order is seeded), so a
column compares the modes on one set of prompts and `unchanged` is what that set gives before any learning.

    python3 benchmarks/distill_modes.py --teacher ~/.cache/verl/models/smollm2-135m-instruct --steps 12
        (the CPU, 2 cores: about 5 minutes a row)
    python3 benchmarks/distill_modes.py --teacher FOLDER --device cuda --engine vllm --batch 32 --n 8 --steps 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from distill_student import pruned_student  # noqa: E402

MODES = {
    "policy_gradient_k1": ["distillation.loss_mode=k1", "distillation.use_policy_gradient=true"],
    "direct_k3": ["distillation.loss_mode=k3", "distillation.use_policy_gradient=false"],
    "unchanged": ["distillation.loss_mode=k1", "distillation.use_policy_gradient=true", "training.lr=1e-12"],
}


def run_mode(name: str, args, student: str) -> dict:
    """One `verl train` run of mode `name`; returns its per-step KLs and how long it took."""
    save = os.path.join(args.runs, name)  # the run's checkpoints: hundreds of MiB, kept apart from the report
    cmd = [sys.executable, "-m", "verl.cli", "train", os.path.join(ROOT, "examples", "arithmetic_grpo.yaml"),
           f"model.name={student}", "distillation.enable=true", f"distillation.teacher={args.teacher}",
           "distillation.use_task_rewards=false", f"rollout.name={args.engine}", f"device={args.device}",
           f"training.total_steps={args.steps}", "training.val_every=0", f"training.lr={args.lr}",
           f"training.batch_size={args.batch}", f"rollout.n={args.n}",
           f"training.mini_batch_size={args.batch * args.n // 2}",  # two optimizer steps a step
           f"training.micro_batch_size={args.batch * args.n // 2}",
           "logging.backends=[jsonl]", "logging.progress_bar=false", "--save_dir", save] + args.set + MODES[name]
    if args.engine == "vllm":
        cmd.append(f"rollout.gpu_memory_utilization={args.gpu_memory_utilization}")
    start = time.time()
    with open(os.path.join(args.out, f"{name}.log"), "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
    if rc != 0:
        raise SystemExit(f"{name}: verl train exited {rc}; see {os.path.join(args.out, name + '.log')}")
    with open(os.path.join(save, "metrics.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    kl = [r["distillation/kl_k3"] for r in rows if "distillation/kl_k3" in r]
    ref = [r.get("actor/kl") for r in rows if "distillation/kl_k3" in r]  # None where the KL loss is off
    return {"kl": kl, "kl_to_start": ref, "seconds": round(time.time() - start, 1)}


def table(results: dict, last: int) -> str:
    steps = len(next(iter(results.values()))["kl"])
    head = "| mode | " + " | ".join(str(i + 1) for i in range(steps)) + f" | last {last} | vs unchanged | s |"
    lines = [head, "|" + "---|" * (steps + 4)]
    base = results.get("unchanged")
    base_last = sum(base["kl"][-last:]) / last if base else None
    for name, r in results.items():
        tail = sum(r["kl"][-last:]) / last
        rel = f"{tail / base_last - 1:+.0%}" if base_last else "-"
        cells = " | ".join(f"{v:.2f}" for v in r["kl"])
        lines.append(f"| {name} | {cells} | {tail:.2f} | {rel} | {r['seconds']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", required=True, help="the teacher's model folder (the student is its first layers)")
    p.add_argument("--layers", type=int, default=20)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=8, help="prompts a step")
    p.add_argument("--n", type=int, default=4, help="samples a prompt")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--engine", default="hf")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides for every row")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--last", type=int, default=3, help="the mean of the last LAST steps in the summary columns")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a row may take")
    p.add_argument("--out", default="/tmp/distill_modes", help="the report, its JSON and each row's log")
    p.add_argument("--runs", default=None, help="the runs and the student (default: OUT/runs)")
    args = p.parse_args(argv)
    args.teacher = os.path.expanduser(args.teacher)
    args.runs = args.runs or os.path.join(args.out, "runs")
    os.makedirs(args.out, exist_ok=True)
    student = pruned_student(args.teacher, args.layers, os.path.join(args.runs, "student"))
    results = {name: run_mode(name, args, student) for name in args.modes}
    report = (f"On-policy distillation, {os.path.basename(args.teacher.rstrip('/'))} pruned to {args.layers} layers "
              f"towards the whole model; {args.batch} prompts x {args.n} samples a step, lr {args.lr}, "
              f"{args.engine} on {args.device}. distillation/kl_k3 (nats a token) on each step's samples:\n\n"
              + table(results, args.last) + "\n")
    print(report)
    with open(os.path.join(args.out, "distill_modes.md"), "w") as fh:
        fh.write(report)
    with open(os.path.join(args.out, "distill_modes.json"), "w") as fh:
        json.dump({"args": vars(args), "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
