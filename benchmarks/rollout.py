"""Rollout throughput: verl's VLLMRollout against raw vLLM on the same engine, at several batch
sizes, plus weight sync, sleep/wake and (optionally) verl's HF backend.

    python benchmarks/rollout.py                                   # tiny llama (head size 32), CPU
    python benchmarks/rollout.py --model ~/.cache/verl/models/smollm2-135m-instruct
    python benchmarks/rollout.py --device cuda --model random:smollm2 --batches 64 256 512 --n 4 \\
        --max_new_tokens 256 --skip_hf --sleep                     # H200: the issue's three batch sizes

All paths get the same prompts and produce exactly `--max_new_tokens` tokens per
sequence (EOS ignored: `ignore_eos` for vLLM, `min_new_tokens` for HF), so tokens/s are
comparable; tokens are counted from what each path returned. `--batches` are sequences per
call (prompts = batch / n). Raw vLLM runs on the same engine object as ours (one engine per
process), measured two ways:
  raw (plain):       `LLM.generate(prompts, SamplingParams(n, max_tokens, temperature))`,
                     as a user would call it (no log-probs, no seeds, text detokenized);
  raw (same params): `LLM.generate` on exactly the requests our backend sends
                     (`VLLMRollout.build_requests`: the trainer's per-request seeds, logprobs=0,
                     flat log-probs, no detokenization), without our Batch assembly. The
                     target: ours >= 0.95x this one.
and ours twice: with the trainer's sampling (seeded) and unseeded (SamplingParams.seed None:
one SamplingParams for every request), to show what per-request seeds cost.
The vLLM paths run interleaved for `--repeats` rounds, each round starting one path later
(common.timed_interleaved), the prefix cache reset before every call (untimed, as after the
trainer's weight sync), and the median time is reported: a burst of load on a shared machine
then lands on every path, not on one, and no path always follows the same other one.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from verl.rollout.vllm_rollout import VLLMRollout, import_vllm  # noqa: E402

PROMPTS = ["Explain reinforcement learning in one sentence.", "What is 17 + 25?", "Write a short poem about the sea.",
           "Tell me a story about a little robot.", "What is the capital of France?",
           "Give three reasons why exercise helps.", "Summarize the following text.", "Hello, how are you today?"]
PATHS = [("raw_plain", "raw vllm.LLM.generate (plain)"), ("raw_same", "raw vllm.LLM.generate (same params)"),
         ("ours", "verl VLLMRollout.generate"), ("ours_unseeded", "verl VLLMRollout.generate (no seeds)")]


def prompt_batch(tokenizer, num_prompts: int):
    from verl.batch import Batch

    texts = [PROMPTS[i % len(PROMPTS)] for i in range(num_prompts)]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    return Batch(input_ids=enc.input_ids, attention_mask=enc.attention_mask, prompt_text=texts,
                 group_id=list(range(num_prompts)))


def measure_batch(engine, tok, vllm, batch: int, args) -> list[dict]:
    """The four vLLM paths at `batch` sequences per call, interleaved."""
    from verl.rollout.base import SamplingParams

    num_prompts = max(1, batch // args.n)
    prompts = prompt_batch(tok, num_prompts)
    # The trainer's sampling (SamplingParams.from_config): rollout.seed set, so per-request seeds.
    sampling = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    unseeded = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=None)
    raw_prompts = [{"prompt_token_ids": prompts.input_ids[i][prompts.attention_mask[i].bool()].tolist()}
                   for i in range(len(prompts))]
    raw_params = vllm.SamplingParams(n=args.n, max_tokens=args.max_new_tokens, temperature=1.0, ignore_eos=True)
    same_prompts, same_params = engine.build_requests(prompts, sampling)
    engine.llm.generate(raw_prompts[:2], raw_params, use_tqdm=False)  # warm-up
    engine.generate(prompts.select([0, 1]) if num_prompts > 1 else prompts, sampling)  # warm-up of the log-prob path
    ours, around = common.with_around_engine(engine, lambda: engine.generate(prompts, sampling))
    gc_stats: dict = {}  # seconds in the garbage collector per call, by path
    timings = common.timed_interleaved({
        "raw_plain": lambda: engine.llm.generate(raw_prompts, raw_params, use_tqdm=False),
        "raw_same": lambda: engine.llm.generate(same_prompts, same_params, use_tqdm=False),
        "ours": ours,
        "ours_unseeded": lambda: engine.generate(prompts, unseeded),
    }, args.repeats, common.resolve_device(args.device),
        before=engine.llm.reset_prefix_cache,  # as after the trainer's weight sync: no cached prefixes
        gc_stats=gc_stats)
    # Tokens counted from what each path returned (not assumed): generated ids per sequence.
    return common.rollout_rows(timings, PATHS, num_prompts * args.n, num_prompts * args.n * args.max_new_tokens,
                               lambda out: sum(len(o.token_ids) for r in out for o in r.outputs), {"ours": around},
                               gc_stats)


def measure_hf(path, tok, cfg, batch: int, args, dtype) -> list[dict]:
    """verl's HF backend on the same prompts, in its two configurations: weights in `dtype`
    (what rollout.hf_weight_copy generates with) and the trainer's default, the actor's float32
    master weights under `dtype` autocast."""
    import torch
    from transformers import AutoModelForCausalLM

    from verl.rollout.base import SamplingParams
    from verl.rollout.hf_rollout import HFRollout

    device = common.resolve_device(args.device)
    prompts = prompt_batch(tok, max(1, batch // args.n))
    sampling = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    rows = []
    for label, weights, compute in ((f"verl HFRollout.generate ({args.dtype} weights)", dtype, None),
                                    ("verl HFRollout.generate (fp32 + autocast)", torch.float32, dtype)):
        if weights == torch.float32 and dtype == torch.float32 and rows:
            break
        model = AutoModelForCausalLM.from_pretrained(path, dtype=weights).to(device).eval()
        model.generation_config.min_new_tokens = args.max_new_tokens
        hf = HFRollout(model, tok, cfg, compute_dtype=compute) if compute else HFRollout(model, tok, cfg)
        hf.generate(prompts.select([0]), SamplingParams(n=1, max_new_tokens=4))  # warm-up
        times, out = common.timed(lambda: hf.generate(prompts, sampling), device)
        tokens = int(out.response_mask.sum())
        rows.append(dict(batch=len(prompts) * args.n, path=label, key="hf", tokens=tokens, seconds=round(times[0], 4),
                         tokens_per_s=round(tokens / times[0])))
        del model, hf
        common.free_memory(device)
    return rows


def main(argv=None) -> dict:
    ap = common.arg_parser(__doc__, "model", device="cpu", repeats={"default": 5, "help": "interleaved timed rounds of "
                                                                                       "the vLLM paths (median kept)"},
                           max_new_tokens=64, dtype={"choices": ["bfloat16", "float16", "float32"]},
                           out={"help": "write the figures here: a .json path (and the .md beside it) or a folder"})
    ap.add_argument("--num_prompts", "--num-prompts", type=int, default=8, help="prompts per call when --batches "
                                                                               "is not given")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--batches", type=int, nargs="+", default=None,
                    help="sequences per call, one measurement each (default: num_prompts x n)")
    ap.add_argument("--skip_hf", "--skip-hf", action="store_true")
    ap.add_argument("--compile", action="store_true", help="let vLLM torch.compile (default on CPU: eager)")
    ap.add_argument("--sleep", action="store_true", help="GPU: start the engine with sleep mode and time sleep/wake")
    ap.add_argument("--gpu_memory_utilization", "--gpu-memory-utilization", type=float, default=0.5)
    args = ap.parse_args(argv)

    import_vllm()
    import torch
    import vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.config import RolloutConfig

    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    info["vllm"] = vllm.__version__
    batches = args.batches or [args.num_prompts * args.n]
    path = common.resolve_model(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    widest = prompt_batch(tok, max(1, max(batches) // args.n)).input_ids.shape[1]
    cfg = RolloutConfig(max_num_seqs=max(batches), kv_cache_gb=1.0, seed=0, max_model_len=widest + args.max_new_tokens + 8,
                        gpu_memory_utilization=args.gpu_memory_utilization,
                        enable_sleep_mode=bool(args.sleep and device.type == "cuda"))
    start = time.perf_counter()
    engine = VLLMRollout(path, tok, cfg, dtype=args.dtype, device=args.device,
                         enforce_eager=False if args.compile else None)
    engine_start_s = time.perf_counter() - start
    engine.extra_sampling_kwargs = {"ignore_eos": True}  # fixed lengths for a fair comparison

    rows = []
    for batch in batches:
        rows += measure_batch(engine, tok, vllm, batch, args)
        print_rows(rows[-len(PATHS):])

    # Weight sync from a Hugging Face copy of the model, then sleep/wake (level 2 once synced).
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[args.dtype]
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    sync_metrics = [engine.sync_weights(hf_model) for _ in range(3)]
    extra = dict(engine_start_s=round(engine_start_s, 2), vllm=vllm.__version__, batches=batches, n=args.n,
                 max_new_tokens=args.max_new_tokens, model=args.model, path=path,
                 weight_sync_s=round(min(m["timing_s/update_weights"] for m in sync_metrics), 4),
                 weight_sync_bytes=sync_metrics[0]["rollout/weight_sync_bytes"],
                 timing=f"vLLM paths: median of {args.repeats} interleaved rounds; HF: one call each")
    if engine.sleep_enabled:
        cycles = []
        for _ in range(2):
            slept = engine.sleep()
            cycles.append(dict(slept, **engine.sync_weights(hf_model)))
        extra["sleep_wake"] = cycles
    del hf_model
    common.free_memory(device)
    if not args.skip_hf:
        rows += measure_hf(path, tok, cfg, batches[0], args, dtype)
        print_rows(rows[-2:])

    for b in batches:
        ours = next(r for r in rows if r["batch"] == b and r["key"] == "ours")
        print(f"batch {b}: ours / raw vLLM (same params) {ours['x_raw_same']:.3f}x, ours / raw (plain) "
              f"{ours['x_raw_plain']:.3f}x; verl around the engine call {ours.get('around_engine_s', float('nan')):.4f} s "
              f"of {ours['seconds']:.4f} s")
    print(f"weight sync: {extra['weight_sync_s']:.3f} s for {extra['weight_sync_bytes'] / 2**20:.1f} MiB   "
          f"engine start: {engine_start_s:.1f} s")
    for c in extra.get("sleep_wake", []):
        print(f"sleep (level {c['rollout/sleep_level']:.0f}) {c['rollout/sleep_s']:.3f} s, freed "
              f"{c['rollout/sleep_freed_gib']:.1f} GiB; wake + re-sync {c['rollout/wake_s']:.3f} s")
    if not all(r.get("ok", True) for r in rows):
        print("WARNING: a vLLM path returned a token count other than the expected one")
    notes = (f"model {args.model} ({args.dtype}, {args.device}), n={args.n}, {args.max_new_tokens} new tokens per "
             f"sequence (ignore_eos), vLLM {vllm.__version__}; x_raw_same = tokens/s over raw LLM.generate on the "
             f"very requests verl sends. {extra['timing']}. gc_s / gc_full: seconds per call in Python's garbage "
             f"collector (median) and full collections over all calls, whole process.")
    common.write_results(args.out, "rollout", info, rows, ["batch", "path", "tokens_per_s", "x_raw_same", "x_raw_plain",
                                                           "tokens", "seconds", "around_engine_s", "gc_s", "gc_full"],
                       extra=extra, notes=notes, quiet=True)
    return dict(extra, rows=rows)


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        ratio = f"{r['x_raw_same']:.3f}x" if "x_raw_same" in r else "-"
        print(f"batch {r['batch']:>5}  {r['path']:<44}{r['tokens_per_s']:>10} tok/s  {ratio:>7} of raw (same)",
              flush=True)


if __name__ == "__main__":
    main()
