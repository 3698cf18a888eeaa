"""Actor update throughput and MFU: packed vs padded, on one device.

Runs verl's own `Actor.update` (PPO clipped loss, fp32 master weights, bf16 autocast on GPU,
fused AdamW, one optimizer step per update) on a synthetic rollout batch whose response
lengths vary widely, once per micro-batching variant:

    padded        `training.micro_batch_size` sequences per micro-batch, padded
    padded+budget padded micro-batches cut by `training.max_tokens_per_micro_batch`
    packed        `training.use_packed_samples` + the same token budget (one packed row)
    packed+compile the same with `model.torch_compile` (decoder layers compiled; the warm-up
                  update pays the compile time and is not timed)
    packed+compile+keep  the same with `training.logprob_keep_logits` (the head's bf16 logits
                  kept for the backward instead of recomputed)
    packed+compile+keep+copy  the same with `model.mixed_precision: param_copy` (forward and
                  backward on a bf16 copy of the fp32 master weights; gradients summed in fp32)
    packed+keep   packed with the kept logits, not compiled
    packed+keep+auto  the same with the token budget verl derives from the free memory (its defaults on a
                  CUDA device: training.max_tokens_per_micro_batch unset, verl/workers/memory_budget.py)
    packed+keep+fused, packed+compile+keep+fused  with model.lora.fused (verl/models/lora_fused.py; LoRA only)

--lora-rank R trains rank-R adapters on every linear layer of a frozen base held in model.dtype, as verl
loads it for LoRA (the model is built again for each variant: peft wraps it in place).

Tokens/s counts real (non-pad) tokens; MFU = model FLOPs / time / bf16 peak, with model
FLOPs as the trainer's perf/mfu counts them (`verl.tracking.flops`: trunk on all tokens, LM head on
response tokens, causal attention; with LoRA the frozen base's forward and input gradients, no weight
gradients; padding and recomputation count zero). Also reports the no-grad forward that
computes old log-probs, and peak GPU memory per variant.

    python benchmarks/actor_update.py --device cpu --tiny                  # seconds, CPU
    python benchmarks/actor_update.py --device cuda --arch qwen2-1.5b      # H200
    python benchmarks/actor_update.py --device cuda --arch qwen2-7b --lora-rank 16 --batch 128 \
        --prompt-len 16 40 --response-len 512 512 --budget 4096 --variants packed+keep packed+keep+fused
                                                                          # the (c) work's update
    THP_MEM_ALLOC_ENABLE=0|1 python benchmarks/actor_update.py --device cpu --arch smollm2-135m --dtype bfloat16 \
        --batch 16 --prompt-len 60 90 --response-len 64 64 --micro-batch 16 --budget 4096 \
        --variants packed+compile+keep --repeats 4      # CPU allocator: page faults per update
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import common  # noqa: E402


def make_batch(n: int, prompt_range, response_range, vocab: int, seed: int = 0):
    """A rollout-layout Batch: left-padded prompts, right-padded responses, uniform lengths."""
    from verl.batch import Batch

    gen = torch.Generator().manual_seed(seed)
    p_len = torch.randint(prompt_range[0], prompt_range[1] + 1, (n,), generator=gen)
    r_len = torch.randint(response_range[0], response_range[1] + 1, (n,), generator=gen)
    P, R = int(p_len.max()), int(r_len.max())
    ids = torch.randint(10, vocab, (n, P + R), generator=gen)
    cols = torch.arange(P + R)
    mask = ((cols >= P - p_len[:, None]) & (cols < P + r_len[:, None])).long()
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0) * mask
    resp_mask = mask[:, P:].float()
    adv = torch.randn(n, generator=gen)[:, None].expand(n, R).contiguous() * resp_mask
    batch = Batch(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, P:],
                  response_mask=resp_mask, advantages=adv, old_log_probs=torch.zeros(n, R),
                  ref_log_probs=torch.zeros(n, R))
    return batch, (p_len + r_len).tolist(), r_len.tolist()


def make_config(device, n: int, micro: int, budget, packed: bool, dtype: str, chunk: int, grad_ckpt: bool = False,
                offload: bool = False, lora_rank: int = 0, max_new_tokens: int = 2048, compile: bool = False,
                keep_logits: bool = False, param_copy: bool = False, fused_lora: bool = False):
    from verl.config import config_from_dict

    return config_from_dict({
        "device": str(device),
        "model": {"dtype": dtype, "enable_gradient_checkpointing": grad_ckpt, "torch_compile": compile,
                  "mixed_precision": "param_copy" if param_copy else "autocast",
                  "lora": {"rank": lora_rank, "alpha": 2 * lora_rank, "fused": fused_lora}},
        "algorithm": {"name": "grpo", "use_kl_loss": False},
        "rollout": {"n": 2, "max_new_tokens": max_new_tokens, "temperature": 1.0},
        "training": {"batch_size": n // 2, "mini_batch_size": n, "micro_batch_size": micro, "num_epochs": 1,
                     "max_tokens_per_micro_batch": budget, "use_packed_samples": packed, "lr": 1e-6,
                     "logprob_chunk_size": chunk, "offload_optimizer": offload, "logprob_keep_logits": keep_logits},
        "data": {"max_prompt_length": 64},
        "logging": {"backends": [], "progress_bar": False},
    })


VARIANTS = {
    "padded": dict(packed=False, budget=False),
    "padded+budget": dict(packed=False, budget=True),
    "packed": dict(packed=True, budget=True),
    "packed+compile": dict(packed=True, budget=True, compile=True),
    "packed+compile+keep": dict(packed=True, budget=True, compile=True, keep=True),
    "packed+compile+keep+copy": dict(packed=True, budget=True, compile=True, keep=True, copy=True),
    "packed+keep": dict(packed=True, budget=True, keep=True),
    "packed+keep+auto": dict(packed=True, budget=False, keep=True, auto=True),
    "packed+keep+fused": dict(packed=True, budget=True, keep=True, fused=True),
    "packed+compile+keep+fused": dict(packed=True, budget=True, compile=True, keep=True, fused=True),
}


def run(args) -> list[dict]:
    from verl.workers.actor import Actor

    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    from verl.tracking.flops import model_shape, update_flops

    dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    # full fine-tuning: float32 master weights; LoRA: the frozen base in model.dtype (verl/workers/actor.py)
    build_dtype = getattr(torch, dtype) if args.lora_rank else torch.float32
    model = common.build_model(args.arch, device, build_dtype)
    cfg_hf = model.config
    n_params = common.param_count(model)
    batch, seq_lens, resp_lens = make_batch(args.batch, args.prompt_len, args.response_len, cfg_hf.vocab_size)
    prompt_lens = [s - r for s, r in zip(seq_lens, resp_lens)]
    flops = common.train_flops(cfg_hf, seq_lens, resp_lens)
    fwd_flops = common.train_flops(cfg_hf, seq_lens, resp_lens, backward=False)
    peak = common.peak_flops(device)
    n_tokens = sum(seq_lens)
    rows = []
    for name in args.variants:
        v = VARIANTS[name]
        cfg = make_config(device, args.batch, args.micro_batch, args.budget if v["budget"] else None, v["packed"],
                          dtype, args.chunk, max_new_tokens=args.response_len[1], compile=v.get("compile", False),
                          keep_logits=v.get("keep", False), param_copy=v.get("copy", False),
                          lora_rank=args.lora_rank, fused_lora=v.get("fused", False))
        row = dict(variant=name, arch=args.arch, params_m=round(n_params / 1e6), sequences=args.batch,
                   tokens=n_tokens, lora_rank=args.lora_rank)
        actor = None
        try:
            if args.lora_rank and rows:  # the last variant's peft wrapping is gone with it: a fresh base
                model = common.build_model(args.arch, device, build_dtype)
            # the variant's micro-batching; +auto: verl's budget from the free memory, as in a run
            actor = Actor.from_config(cfg, device, model, adapt_to_memory=v.get("auto", False))
            row["packing_mode"] = actor.packing_mode
            # with LoRA: the frozen base's forward and input gradients plus the adapters (verl.tracking.flops)
            flops = update_flops(model_shape(actor.model), prompt_lens, resp_lens)
            row.update(flops=flops, trainable_m=round(sum(p.numel() for p in actor.trainable_parameters()) / 1e6, 3))
            common.reset_peak(device)
            t_fwd, (old_lp, _) = common.timed(lambda: actor.compute_log_probs(batch), device, repeats=1 + args.repeats)
            batch.old_log_probs = old_lp
            fwd_s = min(t_fwd[1:])
            faults = []  # per update: host pages touched for the first time

            def counted_update():
                f0 = _minor_faults()
                out = actor.update(batch)
                faults.append(_minor_faults() - f0)
                return out

            times, metrics = common.timed(counted_update, device, repeats=1 + args.repeats)
            upd_s = min(times[1:])  # first call warms up (allocator, kernels, lazy optimizer state)
            derived = actor.budget.tokens if actor.budget is not None else None  # +auto: what verl chose
            row["budget"] = derived or (args.budget if v["budget"] else None)
            row.update(update_s=round(upd_s, 3), tokens_per_s=round(n_tokens / upd_s),
                       tflops=float(f"{flops / upd_s / 1e12:.3g}"), warmup_s=round(times[0], 1),
                       fwd_tokens_per_s=round(n_tokens / fwd_s), peak_gib=common.peak_gib(device), pg_loss=round(float(metrics["actor/pg_loss"]), 5),
                       grad_norm=round(float(metrics["actor/grad_norm"]), 4),
                       page_faults_per_update=sorted(faults[1:])[len(faults[1:]) // 2])  # median, warm-up excluded
            if peak:
                row["mfu"] = round(flops / upd_s / peak, 3)
                row["fwd_mfu"] = round(fwd_flops / fwd_s / peak, 3)
            if device.type == "cuda":  # allocator retries free cached blocks: a device-wide sync each
                row["alloc_retries"] = torch.cuda.memory_stats(device).get("num_alloc_retries", 0)
            if args.profile:
                profile_update(actor, batch, device, os.path.join(args.out or ".", f"profile_{name.replace('+', '_')}.txt"))
        except Exception as exc:  # one variant failing (e.g. out of memory) must not lose the others
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        actor = None
        model.zero_grad(set_to_none=True)
        common.free_memory(device)
        rows.append(row)
        _report(args, info, rows, n_params, n_tokens, flops, peak, dtype, quiet=True)
    _report(args, info, rows, n_params, n_tokens, flops, peak, dtype)
    return rows


def profile_update(actor, batch, device, path: str, top: int = 40) -> None:
    """One more update under torch.profiler: the `top` kernels/ops by device (else CPU) time,
    to see where an update's time goes (GEMMs, attention, elementwise, optimizer)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        actor.update(batch)
        common.sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(prof.key_averages().table(sort_by=key, row_limit=top, max_name_column_width=90))
        if device.type == "cuda":
            fh.write("\n" + gpu_busy_report(prof) + "\n")
    print(f"profile -> {path}")


def _minor_faults() -> int:
    """Minor page faults of this process so far (host memory first touched: the CPU allocator
    handing out fresh pages); 0 where getrusage is unavailable."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def gpu_busy_report(prof, top_gaps: int = 12) -> str:
    """How much of the profiled span the GPU spent running kernels: the union of kernel
    intervals against the wall span from the first CPU op to the last kernel, and the
    largest idle gaps with the kernels on either side (where the host made the GPU wait)."""
    from torch.autograd import DeviceType

    events = prof.events()
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                     if e.device_type == DeviceType.CUDA and "Command Buffer" not in e.name)
    if not kernels:
        return "no kernels recorded"
    cpu_start = min(e.time_range.start for e in events if e.device_type == DeviceType.CPU)
    span = max(end for _, end, _ in kernels) - cpu_start
    busy, gaps, cur_end, prev = 0.0, [], kernels[0][0], None
    gaps.append((kernels[0][0] - cpu_start, "(start)", kernels[0][2]))
    cur_start = kernels[0][0]
    for start, end, name in kernels:
        if start > cur_end:
            busy += cur_end - cur_start
            gaps.append((start - cur_end, prev, name))
            cur_start = start
        if end >= cur_end:
            cur_end, prev = end, name
    busy += cur_end - cur_start
    lines = [f"GPU busy {busy / 1e3:.1f} ms of a {span / 1e3:.1f} ms span ({busy / span:.1%}); "
             f"idle {(span - busy) / 1e3:.1f} ms in {len(gaps)} gaps. Largest gaps:"]
    for gap, before, after in sorted(gaps, reverse=True)[:top_gaps]:
        lines.append(f"  {gap / 1e3:8.2f} ms  after {str(before)[:60]}  before {after[:60]}")
    return "\n".join(lines)


def _report(args, info, rows, n_params, n_tokens, flops, peak, dtype, quiet=False):
    base = next((r for r in rows if r["variant"] == "padded" and "update_s" in r), None)
    for r in rows:
        if base and "update_s" in r:
            r["speedup_vs_padded"] = round(base["update_s"] / r["update_s"], 2)
    cols = ["variant", "packing_mode", "trainable_m", "tokens", "budget", "update_s", "tokens_per_s", "speedup_vs_padded", "tflops", "mfu",
            "fwd_tokens_per_s", "fwd_mfu", "peak_gib", "alloc_retries", "page_faults_per_update", "warmup_s", "error"]
    pad_frac = 1 - n_tokens / (args.batch * (max(args.prompt_len) + max(args.response_len)))
    lora = f", LoRA rank {args.lora_rank} on a frozen {dtype} base" if args.lora_rank else ""
    notes = (f"{args.arch} ({n_params / 1e6:.0f}M parameters{lora}), {args.batch} sequences, prompt lengths "
             f"{args.prompt_len[0]}-{args.prompt_len[1]}, response lengths {args.response_len[0]}-{args.response_len[1]} "
             f"(uniform), {n_tokens} real tokens ({pad_frac:.0%} of the full padded block is padding); "
             f"micro_batch_size {args.micro_batch}, token budget {args.budget}; model dtype {dtype} over fp32 master "
             f"weights (autocast; +copy: model.mixed_precision param_copy); logprob_chunk_size {args.chunk}; best of {args.repeats} timed updates after one "
             f"warm-up. MFU against {(peak or 0) / 1e12:.0f} TFLOP/s bf16 dense peak; model FLOPs "
             f"{flops / 1e12:.2f} TFLOP per update (verl.tracking.flops).")
    common.write_results(args.out, "actor_update", info, rows, cols, extra=dict(flops_per_update=flops,
                                                                                args=vars(args)), notes=notes,
                         quiet=quiet)


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", "tiny", "arch", "prompt_len", "response_len", "micro_batch", "budget",
                           "chunk", tiny={"help": "small CPU-sized problem (tiny-qwen2)"},
                           out={"help": "directory for actor_update.json / .md"},
                           dtype={"default": None, "help": "model.dtype (default: bfloat16 on CUDA, float32 on the CPU)"},
                           repeats={"default": 2, "help": "timed updates after one warm-up"})
    ap.add_argument("--batch", type=int, default=64, help="sequences per update")
    ap.add_argument("--variants", nargs="+", default=["padded", "padded+budget", "packed"], choices=list(VARIANTS))
    ap.add_argument("--profile", action="store_true", help="also write profile_<variant>.txt (top kernels) to --out")
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank on a frozen base (0: full)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.arch, args.batch, args.prompt_len, args.response_len = "tiny-qwen2", 16, [8, 32], [4, 192]
        args.micro_batch, args.budget, args.chunk, args.repeats = 4, 640, 256, 2
    return args


if __name__ == "__main__":
    run(parse())
