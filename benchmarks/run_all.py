"""All performance figures in one command, under a wall-clock budget.

    python benchmarks/run_all.py --device cuda --out OUT_DIR                # H200: < 8 minutes
    python benchmarks/run_all.py --device cpu --tiny --out OUT_DIR          # code paths, minutes

Stages, most important first, each in its own process with its share of the budget (a
stage that runs out keeps what it measured; later stages still run):

    actor     actor update tokens/s and MFU: padded, packed, packed + torch.compile (qwen2-1.5b)
    e2e       GRPO step throughput, verl vs TRL's GRPOTrainer (smollm2-135m architecture, HF generate)
    ladder    largest model one GPU trains: LoRA (7B first), full fine-tuning
    memory    peak memory per configuration, chunked vs naive logits

Writes three files to OUT_DIR: results.json (every row, machine, commands), results.md
(the tables) and run_all.log (all output) -- few files, so they fit a device's return limits.
TRL is optional: without it (or its `datasets` dependency) the TRL rows say so.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, share of the budget, script, GPU args, CPU --tiny args)
STAGES = [
    ("actor", 0.32, "actor_update.py", ["--arch", "qwen2-1.5b", "--variants", "padded", "padded+budget", "packed", "packed+compile",
                                        "packed+compile+keep", "--repeats", "2"], ["--tiny", "--variants", "padded", "packed"]),
    ("e2e", 0.30, "e2e_grpo.py", ["--systems", "verl-hf", "verl-hf-static", "verl-hf-graph", "trl", "trl-bf16-static",
                                  "--max-new-tokens", "128", "--steps", "3", "--timeout", "200"], ["--tiny"]),
    ("ladder", 0.24, "memory.py", ["--ladder", "--no-configs", "--no-logits", "--probe-timeout", "90"],
     ["--tiny", "--ladder", "--no-configs", "--no-logits"]),
    ("memory", 0.14, "memory.py", ["--configs", "full, packed, grad-ckpt", "full, packed, grad-ckpt, offload-optimizer",
                                   "lora r16, packed, grad-ckpt", "full + reference", "full + reference, offload-idle",
                                   "--batch", "16"],
     ["--tiny", "--configs", "full, packed, grad-ckpt", "lora r16, packed, grad-ckpt",
      "full + reference, offload-idle"]),
]


def targets(parts: dict) -> list[dict]:
    """The issue's targets, checked against what was measured (None = not measured)."""
    out = []
    actor = {r["variant"]: r for r in parts.get("actor_update", {}).get("rows", [])}
    best_packed = max((r for k, r in actor.items() if k.startswith("packed") and "mfu" in r),
                      key=lambda r: r["mfu"], default=None)
    out.append(dict(target="actor update MFU >= 50% (1.5B, packed)",
                    measured=best_packed and f"{best_packed['mfu']:.1%} ({best_packed['variant']})",
                    met=best_packed and best_packed["mfu"] >= 0.5))
    pk, pad = actor.get("packed"), actor.get("padded")
    if pk and pad and "update_s" in pk and "update_s" in pad:
        sp = pad["update_s"] / pk["update_s"]
        out.append(dict(target="packing >= 1.5x padding (wide response lengths)", measured=f"{sp:.2f}x",
                        met=sp >= 1.5))
    e2e = parts.get("e2e_grpo", {}).get("rows", [])
    verl = max((r for r in e2e if r["system"].startswith("verl") and "tokens_per_s" in r),
               key=lambda r: r["tokens_per_s"], default=None)
    if verl and verl.get("x_trl") is not None:
        out.append(dict(target="end-to-end GRPO step >= 3x TRL (same engine class)",
                        measured=f"{verl['x_trl']:.2f}x TRL default, {verl.get('x_best_trl', 0):.2f}x best TRL "
                                 f"({verl['system']})", met=min(verl["x_trl"], verl.get("x_best_trl", 0)) >= 3))
    lad = parts.get("memory_ladder", {}).get("rows", [])
    lora7 = next((r for r in lad if r.get("mode") == "lora" and r.get("arch") == "qwen2-7b"), None)
    if lora7:
        out.append(dict(target="7B trains with LoRA on one GPU", measured=f"peak {lora7.get('peak_gib')} GiB",
                        met=bool(lora7.get("ok"))))
    return out


def main(argv=None):
    ap = common.arg_parser(__doc__, "device", "tiny", out={"required": True, "help": "folder for results.json, "
                                                                                     "results.md and run_all.log"})
    ap.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget for everything")
    ap.add_argument("--stages", nargs="+", default=[s[0] for s in STAGES], choices=[s[0] for s in STAGES])
    args = ap.parse_args(argv)
    start = time.time()
    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="verl-bench-")
    log = open(os.path.join(args.out, "run_all.log"), "w")
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([common.ROOT, os.environ.get("PYTHONPATH", "")]))
    device = common.resolve_device(args.device)
    stages = [s for s in STAGES if s[0] in args.stages]
    total_share = sum(s[1] for s in stages)
    commands = {}
    for i, (name, share, script, gpu_args, cpu_args) in enumerate(stages):
        remaining = args.budget_s - (time.time() - start)
        later = sum(s[1] for s in stages[i + 1:])
        # This stage's share, plus whatever earlier stages left unused, minus what later ones need.
        allot = max(20.0, remaining - args.budget_s * later / total_share)
        if remaining < 20:
            log.write(f"== {name}: skipped, out of time\n")
            continue
        extra = cpu_args if args.tiny else gpu_args
        cmd = [sys.executable, os.path.join(HERE, script), "--device", args.device, "--out", scratch, *extra]
        if script == "memory.py":
            cmd += ["--budget-s", str(max(10.0, allot - 25))]
        commands[name] = " ".join(cmd)
        log.write(f"== {name} ({allot:.0f} s): {commands[name]}\n")
        log.flush()
        t0 = time.time()
        try:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=allot, cwd=common.ROOT)
        except subprocess.TimeoutExpired:
            log.write(f"== {name}: stopped at its {allot:.0f} s limit\n")
        log.write(f"== {name}: {time.time() - t0:.0f} s\n")
        log.flush()
    parts = {}
    for path in sorted(glob.glob(os.path.join(scratch, "*.json"))):
        with open(path) as fh:
            data = json.load(fh)
        parts[data["benchmark"]] = data
    info = common.machine_info(device)
    info["wall_s"] = round(time.time() - start, 1)
    checks = targets(parts)
    md = [f"# verl performance figures\n\n{info['date']} | {info.get('gpu') or info.get('cpu')} | torch "
          f"{info.get('torch')} | transformers {info.get('transformers')} | {info['wall_s']} s in all\n",
          "## Targets\n", (common.format_table(checks, ["target", "measured", "met"]) if checks else "(none measured)")
          + "\n"]
    for path in sorted(glob.glob(os.path.join(scratch, "*.md"))):
        with open(path) as fh:
            md.append(fh.read())
    md.append(f"\ncommand: `{' '.join([os.path.basename(sys.executable)] + sys.argv)}`\n")
    with open(os.path.join(args.out, "results.md"), "w") as fh:
        fh.write("\n".join(md))
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump(dict(machine=info, targets=checks, stage_commands=commands, results=parts), fh, indent=2, default=str)
    log.close()
    print("\n".join(md))


if __name__ == "__main__":
    main()
