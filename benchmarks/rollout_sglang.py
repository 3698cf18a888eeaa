"""Rollout throughput of verl's SGLang backend against raw `sglang.Engine.generate` on the same
engine, at several batch sizes, plus weight sync and sleep/wake; optionally beside the vLLM
figures of benchmarks/rollout.py on the same work (SGLang and vLLM pin conflicting packages, so
they run in two processes with two package folders; `--vllm_results` reads the other's JSON).

    python benchmarks/rollout_sglang.py --model random:smollm2 --batches 64 256 512 --n 4 \\
        --max_new_tokens 256 --sleep --vllm_results /tmp/h200_results/rollout_h200.json   # H200

Same work as benchmarks/rollout.py: the same prompts, exactly `--max_new_tokens` tokens per
sequence (`ignore_eos`), tokens counted from what each path returned. Four paths, interleaved for
`--repeats` rounds, each round starting one path later and SGLang's cache flushed before every call
(untimed; the trainer flushes it after each weight sync), median kept (common.timed_interleaved):
  raw (plain):       `Engine.generate(input_ids=prompts, sampling_params={n, max_new_tokens,
                     temperature, ignore_eos})`, as a user would call it (SGLang's own parallel
                     sampling, no log-probs);
  raw (same params): `Engine.generate` on exactly the requests verl sends
                     (`SGLangRollout.build_requests`: each prompt n times, log-probs on, nothing
                     trimmed), without verl's Batch assembly. The target: verl >= 0.95x this one;
  verl:              `SGLangRollout.generate` (requests, results into the Batch);
  verl, GC paused:   the same with Python's garbage collector off for the call (gc_probe.gc_paused): a
                     probe, not verl's code, of whether collections explain verl's time around the call.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import gc_probe  # noqa: E402
from rollout import PROMPTS, prompt_batch  # noqa: E402,F401  (same prompts as the vLLM benchmark)
from verl.rollout.sglang_rollout import SGLangRollout, import_sglang  # noqa: E402

PATHS = [("raw_plain", "raw sglang.Engine.generate (plain)"), ("raw_same", "raw sglang.Engine.generate (same params)"),
         ("ours", "verl SGLangRollout.generate"), ("ours_gc_off", "verl SGLangRollout.generate, GC paused")]


def generated_tokens(out) -> int:
    return sum(int(o["meta_info"]["completion_tokens"]) for o in out)


def measure_batch(engine: SGLangRollout, tok, batch: int, args) -> list[dict]:
    from verl.rollout.base import SamplingParams

    num_prompts = max(1, batch // args.n)
    prompts = prompt_batch(tok, num_prompts)
    sampling = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    raw_ids = [prompts.input_ids[i][prompts.attention_mask[i].bool()].tolist() for i in range(len(prompts))]
    raw_params = {"n": args.n, "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "ignore_eos": True}
    same_ids, same_params = engine.build_requests(prompts, sampling)
    sgl = engine.engine
    sgl.generate(input_ids=raw_ids[:2], sampling_params=raw_params)  # warm-up
    engine.generate(prompts.select([0, 1]) if num_prompts > 1 else prompts, sampling)
    ours, around = common.with_around_engine(engine, lambda: engine.generate(prompts, sampling))
    ours_gc_off, around_gc_off = common.with_around_engine(engine, gc_probe.gc_paused(
        lambda: engine.generate(prompts, sampling)))
    gc_stats: dict = {}  # seconds in the garbage collector per call, by path
    timings = common.timed_interleaved({
        "raw_plain": lambda: sgl.generate(input_ids=raw_ids, sampling_params=raw_params),
        "raw_same": lambda: sgl.generate(input_ids=same_ids, sampling_params=same_params, return_logprob=True),
        "ours": ours,
        "ours_gc_off": ours_gc_off,
    }, args.repeats, common.resolve_device("cuda"), before=sgl.flush_cache,  # the trainer flushes after each sync
        gc_stats=gc_stats)
    return common.rollout_rows(timings, PATHS, num_prompts * args.n, num_prompts * args.n * args.max_new_tokens,
                               generated_tokens, {"ours": around, "ours_gc_off": around_gc_off}, gc_stats)


def vllm_rows(path: str) -> list[dict]:
    """benchmarks/rollout.py's rows (raw vLLM and verl's VLLMRollout) from its JSON, if given."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as fh:
        data = json.load(fh)
    return [dict(r, engine="vllm") for r in data.get("rows", []) if r.get("key") in ("raw_plain", "raw_same", "ours")]


def main(argv=None) -> dict:
    ap = common.arg_parser(__doc__, "model", device="cuda", repeats={"default": 3, "help": "interleaved timed rounds"},
                           max_new_tokens=256, dtype={"choices": ["bfloat16", "float16", "float32"],
                                                      "default": "bfloat16"},
                           out={"help": "write the figures here: a .json path (and the .md beside it) or a folder"})
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--batches", type=int, nargs="+", default=[64], help="sequences per call")
    ap.add_argument("--sleep", action="store_true", help="start the engine with the memory saver; time sleep/wake")
    ap.add_argument("--gpu_memory_utilization", "--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--vllm_results", "--vllm-results", default=None,
                    help="benchmarks/rollout.py's JSON on the same work, printed beside these rows")
    args = ap.parse_args(argv)

    sglang = import_sglang()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.config import RolloutConfig

    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    info["sglang"] = sglang.__version__
    path = common.resolve_model(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    widest = prompt_batch(tok, max(1, max(args.batches) // args.n)).input_ids.shape[1]
    cfg = RolloutConfig(max_num_seqs=max(args.batches), seed=0, max_model_len=widest + args.max_new_tokens + 8,
                        gpu_memory_utilization=args.gpu_memory_utilization, enable_sleep_mode=args.sleep)
    start = time.perf_counter()
    engine = SGLangRollout(path, tok, cfg, dtype=args.dtype, device=str(device))
    engine_start_s = time.perf_counter() - start
    engine.extra_sampling_kwargs = {"ignore_eos": True}
    rows = []
    for batch in args.batches:
        rows += measure_batch(engine, tok, batch, args)
        print_rows(rows[-len(PATHS):])

    dtype = getattr(torch, args.dtype)
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    sync_metrics = [engine.sync_weights(hf_model) for _ in range(3)]
    extra = dict(engine_start_s=round(engine_start_s, 2), sglang=sglang.__version__, batches=args.batches, n=args.n,
                 max_new_tokens=args.max_new_tokens, model=args.model,
                 weight_sync_s=round(min(m["timing_s/update_weights"] for m in sync_metrics), 4),
                 weight_sync_bytes=sync_metrics[0]["rollout/weight_sync_bytes"],
                 timing=f"median of {args.repeats} interleaved rounds")
    if args.sleep:
        extra["sleep_wake"] = [dict(engine.sleep(), **engine.sync_weights(hf_model)) for _ in range(2)]
    engine.shutdown()

    for r in rows:
        r["engine"] = "sglang"
    others = vllm_rows(args.vllm_results)
    for b in args.batches:
        ours = next(r for r in rows if r["batch"] == b and r["key"] == "ours")
        line = (f"batch {b}: verl SGLang / raw SGLang (same params) {ours['x_raw_same']:.3f}x, / raw (plain) "
                f"{ours['x_raw_plain']:.3f}x; verl around the engine call {ours.get('around_engine_s', float('nan')):.4f} "
                f"s of {ours['seconds']:.4f} s")
        vllm_ours = next((r for r in others if r["batch"] == b and r["key"] == "ours"), None)
        if vllm_ours:
            line += f"; verl SGLang / verl vLLM {ours['tokens_per_s'] / vllm_ours['tokens_per_s']:.3f}x"
        print(line)
    print(f"weight sync: {extra['weight_sync_s']:.3f} s for {extra['weight_sync_bytes'] / 2**20:.1f} MiB   "
          f"engine start: {engine_start_s:.1f} s")
    for c in extra.get("sleep_wake", []):
        print(f"sleep {c['rollout/sleep_s']:.3f} s, freed {c['rollout/sleep_freed_gib']:.1f} GiB; wake + re-sync "
              f"{c['rollout/wake_s']:.3f} s")
    if not all(r.get("ok", True) for r in rows):
        print("WARNING: an SGLang path returned a token count other than the expected one")
    notes = (f"model {args.model} ({args.dtype}, {args.device}), n={args.n}, {args.max_new_tokens} new tokens per "
             f"sequence (ignore_eos), SGLang {sglang.__version__}; x_raw_same = tokens/s over raw Engine.generate on "
             f"the very requests verl sends; vLLM rows (engine vllm) from {args.vllm_results or 'not given'}, "
             f"measured in another process on the same work. {extra['timing']}. gc_s / gc_full: seconds per call "
             f"in Python's garbage collector (median) and full collections over all calls, whole process.")
    common.write_results(args.out, "rollout_sglang", info, rows + others,
                         ["engine", "batch", "path", "tokens_per_s", "x_raw_same", "x_raw_plain", "tokens", "seconds",
                          "around_engine_s", "gc_s", "gc_full"],
                         extra=extra, notes=notes, quiet=True)
    return dict(extra, rows=rows)


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        print(f"batch {r['batch']:>5}  {r['path']:<44}{r['tokens_per_s']:>10} tok/s  {r['x_raw_same']:.3f}x of raw "
              f"(same)", flush=True)


if __name__ == "__main__":
    main()
