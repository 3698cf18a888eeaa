"""Peak GPU memory per configuration, logit memory, and the largest model one GPU trains.

1. configs: one `Actor.update` (fp32 master weights, bf16 autocast, AdamW) on the same
   rollout batch under each memory setting; peak memory during the update, memory still
   held while the actor is idle (what generation has to share the GPU with), update time.
2. logits: forward + backward of response log-probs for one micro-batch, naive full logits
   (B, R, V) float32 vs verl's chunked head.
3. ladder: the largest architecture (random weights) for which one update (packed, gradient
   checkpointing) runs, full fine-tuning and LoRA; each try in its own process.

    python benchmarks/memory.py --device cpu --tiny                   # code paths, seconds
    python benchmarks/memory.py --device cuda --arch qwen2-1.5b --ladder
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import common  # noqa: E402
from actor_update import make_batch, make_config  # noqa: E402

CONFIGS = {
    "full, padded": dict(packed=False),
    "full, packed": dict(packed=True),
    "full, packed, grad-ckpt": dict(packed=True, grad_ckpt=True),
    "full, packed, grad-ckpt, offload-optimizer": dict(packed=True, grad_ckpt=True, offload=True),
    "lora r16, packed, grad-ckpt": dict(packed=True, grad_ckpt=True, lora=16),
    "full + reference": dict(packed=True, grad_ckpt=True, reference=True),
    "full + reference, offload-idle": dict(packed=True, grad_ckpt=True, reference=True, offload_idle=True),
}

# The ladder, most important first; a size is skipped once a larger one of its mode trained.
LADDER = [("lora", "qwen2-7b"), ("full", "qwen2-7b"), ("lora", "qwen2.5-32b"), ("full", "qwen2.5-3b"),
          ("lora", "qwen2.5-14b"), ("full", "qwen2-1.5b")]
MODES = ("full", "lora")


def _allocated(device):
    return round(torch.cuda.memory_allocated(device) / 2 ** 30, 2) if device.type == "cuda" else None


def build_actor(arch, device, spec, batch_size, micro, budget, chunk, max_new):
    from verl.workers.actor import Actor

    lora = spec.get("lora", 0)
    dtype = "bfloat16" if device.type == "cuda" else "float32"
    model = common.build_model(arch, device, torch.bfloat16 if (lora and device.type == "cuda") else torch.float32)
    cfg = make_config(device, batch_size, micro, budget if spec.get("packed") else None, spec.get("packed", False),
                      dtype, chunk, grad_ckpt=spec.get("grad_ckpt", False), offload=spec.get("offload", False),
                      lora_rank=lora, max_new_tokens=max_new)
    cfg.training.offload_idle_models = spec.get("offload_idle", False)
    return Actor.from_config(cfg, device, model, adapt_to_memory=False), cfg  # a config fits or it does not


def run_config(name, spec, args, device, batch) -> dict:
    from verl.workers.reference import Reference

    row = dict(config=name)
    actor = ref = None
    try:
        common.reset_peak(device)
        actor, cfg = build_actor(args.arch, device, spec, len(batch), args.micro_batch, args.budget, args.chunk,
                                 args.response_len[1])
        if spec.get("reference") or spec.get("lora"):
            ref = Reference.from_config(cfg, device, actor.model, adapt_to_memory=False)
            batch.ref_log_probs = ref.compute_log_probs(batch)
        batch.old_log_probs, _ = actor.compute_log_probs(batch)
        actor.update(batch)  # creates the optimizer state
        common.reset_peak(device)
        before = _allocated(device)
        times, _ = common.timed(lambda: actor.update(batch), device)
        row.update(peak_gib=common.peak_gib(device), idle_gib=_allocated(device), before_update_gib=before,
                   update_s=round(times[0], 2))
        if ref is not None:
            common.reset_peak(device)
            t_ref, _ = common.timed(lambda: ref.compute_log_probs(batch), device)
            row.update(ref_peak_gib=common.peak_gib(device), ref_s=round(t_ref[0], 2))
        row["trainable_m"] = round(sum(p.numel() for p in actor.model.parameters() if p.requires_grad) / 1e6, 1)
    except Exception as exc:
        row["error"] = ("OOM " if common.is_oom(exc) else "") + f"{type(exc).__name__}: {str(exc).splitlines()[0][:140]}"
    actor = ref = None  # free before the next configuration
    common.free_memory(device)
    return row


def logits_memory(args, device) -> list[dict]:
    from verl.workers.logprobs import naive_response_log_probs, response_log_probs
    from verl.workers.optim import autocast_context

    model = common.build_model(args.arch, device, torch.float32)
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    b, p, r = args.logits_shape
    ids = torch.randint(10, model.config.vocab_size, (b, p + r), device=device)
    mask = torch.ones_like(ids)
    pos = torch.arange(p + r, device=device).expand(b, -1)
    rows = []
    variants = [("naive (B, R, V) float32 logits", lambda: naive_response_log_probs(model, ids, mask, pos, r))]
    for chunk in sorted({args.chunk, max(1, args.chunk // 4)}, reverse=True):
        variants.append((f"chunked head, {chunk}-token chunks",
                         lambda c=chunk: response_log_probs(model, ids, mask, pos, r, chunk_size=c)))
    for name, fn in variants:
        row = dict(config=name, tokens=b * r)
        try:
            model.zero_grad(set_to_none=True)
            common.reset_peak(device)
            base = _allocated(device)

            def step():
                with autocast_context(device, dt):
                    lp, ent = fn()
                (lp.sum() + ent.sum()).backward()

            step()  # warm-up
            model.zero_grad(set_to_none=True)
            common.reset_peak(device)
            times, _ = common.timed(step, device)
            peak = common.peak_gib(device)
            row.update(peak_gib=peak, extra_gib=round(peak - base, 2) if peak is not None else None,
                       fwd_bwd_s=round(times[0], 3))
        except Exception as exc:
            row["error"] = ("OOM " if common.is_oom(exc) else "") + f"{type(exc).__name__}: {str(exc).splitlines()[0][:140]}"
        common.free_memory(device)
        rows.append(row)
    logits_gib = b * r * model.config.vocab_size * 4 / 2 ** 30
    for row in rows:
        row["fp32_logits_gib"] = round(logits_gib, 2)
    model = None
    common.free_memory(device)
    return rows


def probe(args) -> dict:
    """One try of the ladder (runs in its own process)."""
    device = common.resolve_device(args.device)
    spec = dict(packed=True, grad_ckpt=True, lora=16 if args.mode == "lora" else 0)
    out = dict(arch=args.probe, mode=args.mode, params_b=round(common.param_count(args.probe) / 1e9, 2))
    t0 = time.time()
    try:
        actor, cfg = build_actor(args.probe, device, spec, args.probe_batch, 1, args.budget, args.chunk,
                                 args.probe_len[1])
        batch, seq_lens, _ = make_batch(args.probe_batch, args.probe_len, args.probe_len, actor.model.config.vocab_size)
        out["tokens"] = sum(seq_lens)
        if args.mode == "lora":
            from verl.workers.reference import Reference

            ref = Reference.from_config(cfg, device, actor.model, adapt_to_memory=False)
            batch.ref_log_probs = ref.compute_log_probs(batch)
        batch.old_log_probs, _ = actor.compute_log_probs(batch)
        times, metrics = common.timed(lambda: actor.update(batch), device)
        out.update(ok=bool(metrics["actor/nonfinite_updates"] == 0), update_s=round(times[0], 2),
                   peak_gib=common.peak_gib(device),
                   trainable_m=round(sum(p.numel() for p in actor.model.parameters() if p.requires_grad) / 1e6, 1))
    except Exception as exc:
        out.update(ok=False, error=("OOM " if common.is_oom(exc) else "") + f"{type(exc).__name__}: "
                   f"{str(exc).splitlines()[0][:120]}", peak_gib=common.peak_gib(device))
    out["wall_s"] = round(time.time() - t0, 1)
    return out


def ladder(args, deadline: float, on_row=None) -> list[dict]:
    rows: list[dict] = []
    for mode, arch in LADDER:
        size = common.param_count(arch)
        if any(r.get("ok") and r["mode"] == mode and r["params_b"] * 1e9 > size for r in rows):
            continue  # a larger model of this mode already trained
        if args.tiny:  # one tiny stand-in per mode
            if any(r["mode"] == mode for r in rows):
                continue
            arch, size = {"full": "tiny-qwen2", "lora": "tiny-llama"}[mode], 0
        if time.time() > deadline:
            rows.append(dict(arch=arch, mode=mode, error="skipped: out of time"))
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--probe", arch, "--mode", mode, "--device", args.device,
               "--budget", str(args.budget), "--chunk", str(args.chunk), "--probe-batch", str(args.probe_batch),
               "--probe-len", *map(str, args.probe_len)]
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
                   PYTHONPATH=os.pathsep.join([common.ROOT, os.environ.get("PYTHONPATH", "")]))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                  timeout=max(30, min(args.probe_timeout, deadline - time.time())))
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")]
            row = json.loads(lines[-1][6:]) if lines else dict(
                arch=arch, mode=mode, ok=False, error=f"exit {proc.returncode}: "
                + " | ".join((proc.stderr or "").strip().splitlines()[-2:])[-200:])
        except subprocess.TimeoutExpired:
            row = dict(arch=arch, mode=mode, ok=False, error="timeout")
        row.setdefault("params_b", round(size / 1e9, 2))
        print(json.dumps(row), flush=True)
        rows.append(row)
        if on_row:
            on_row(rows)
    return rows


def run(args):
    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    deadline = time.time() + args.budget_s
    rows = []
    batch, seq_lens, _ = make_batch(args.batch, args.prompt_len, args.response_len, common.ARCHS[args.arch]["vocab_size"])
    for name in ([] if args.no_configs else args.configs):
        if time.time() > deadline:
            rows.append(dict(config=name, error="skipped: out of time"))
            continue
        rows.append(run_config(name, CONFIGS[name], args, device, batch))
        print(json.dumps(rows[-1]), flush=True)
        _report_configs(args, info, rows, seq_lens, quiet=True)
    if rows:
        _report_configs(args, info, rows, seq_lens)
    if not args.no_logits and time.time() < deadline:
        lrows = logits_memory(args, device)
        b, p, r = args.logits_shape
        common.write_results(args.out, "memory_logits", info, lrows,
                             ["config", "tokens", "peak_gib", "extra_gib", "fp32_logits_gib", "fwd_bwd_s", "error"],
                             notes=f"{args.arch}, {b} sequences x ({p} prompt + {r} response) tokens, forward + "
                                   f"backward of response log-probs and entropy (extra = peak minus the "
                                   f"memory held before).")
    if args.ladder:
        lad = ladder(args, deadline, lambda done: _report_ladder(args, info, done, quiet=True))
        _report_ladder(args, info, lad)
    return rows


def _report_configs(args, info, rows, seq_lens, quiet=False):
    n_params = common.param_count(args.arch)
    notes = (f"{args.arch} ({n_params / 1e6:.0f}M parameters); batch of {args.batch} sequences, {sum(seq_lens)} "
             f"tokens (prompts {args.prompt_len[0]}-{args.prompt_len[1]}, responses {args.response_len[0]}-"
             f"{args.response_len[1]}); padded: micro_batch_size {args.micro_batch}; packed: token budget "
             f"{args.budget}. peak = torch.cuda.max_memory_allocated during the second update; idle = allocated "
             f"after it (what the rollout engine shares the GPU with).")
    common.write_results(args.out, "memory_configs", info, rows,
                         ["config", "peak_gib", "idle_gib", "update_s", "ref_peak_gib", "ref_s", "trainable_m", "error"],
                         notes=notes, quiet=quiet)


def _report_ladder(args, info, lad, quiet=False):
    for r in lad:
        r["params"] = f"{r.get('params_b', '?')}B"
    best = {m: max((r for r in lad if r.get("mode") == m and r.get("ok")), key=lambda r: r.get("params_b", 0),
                   default=None) for m in MODES}
    notes = ("One update (PPO loss, AdamW, packed, gradient checkpointing, bf16 autocast; full: fp32 master weights "
             "+ fp32 AdamW state; LoRA r16 all-linear on a bf16 base, reference = base with adapters off) on "
             f"{args.probe_batch} sequences of {args.probe_len[0]}-{args.probe_len[1]} tokens. Largest: full "
             f"fine-tuning {best['full'] and best['full']['arch']}, LoRA {best['lora'] and best['lora']['arch']}.")
    common.write_results(args.out, "memory_ladder", info, lad,
                         ["mode", "arch", "params", "ok", "peak_gib", "update_s", "trainable_m", "wall_s", "error"],
                         notes=notes, quiet=quiet)


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", "tiny", "arch", "prompt_len", "response_len", "micro_batch", "budget",
                           "chunk", "out")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--logits-shape", type=int, nargs=3, default=[8, 256, 1024], metavar=("B", "P", "R"))
    ap.add_argument("--no-logits", action="store_true")
    ap.add_argument("--no-configs", action="store_true", help="skip the per-configuration table")
    ap.add_argument("--ladder", action="store_true", help="also find the largest trainable model")
    ap.add_argument("--probe-batch", type=int, default=8)
    ap.add_argument("--probe-len", type=int, nargs=2, default=[512, 1024])
    ap.add_argument("--probe-timeout", type=int, default=150)
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new measurements after this")
    ap.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tiny:
        args.arch, args.batch, args.prompt_len, args.response_len = "tiny-qwen2", 8, [8, 32], [4, 96]
        args.micro_batch, args.budget, args.chunk, args.logits_shape = 4, 256, 64, [4, 16, 64]
        args.probe_batch, args.probe_len = 4, [16, 64]
    return args


if __name__ == "__main__":
    a = parse()
    if a.probe:
        print("PROBE " + json.dumps(probe(a)), flush=True)
    else:
        run(a)
