"""Rollout throughput: raw vLLM vs our VLLMRollout vs our HF backend, plus weight-sync time.

    python benchmarks/rollout.py                                   # tiny llama (head size 32)
    python benchmarks/rollout.py --model ~/.cache/verl/models/smollm2-135m-instruct
    python benchmarks/rollout.py --model random:smollm2            # random SmolLM2-135M shape

All paths get the same prompts and produce exactly `--max_new_tokens` tokens per
sequence (EOS ignored: `ignore_eos` for vLLM, `min_new_tokens` for HF), so tokens/s are
comparable; tokens are counted from what each path returned. Raw vLLM runs on the same
engine object as ours (one engine per process), measured two ways:
  raw (plain):       `LLM.generate(prompts, SamplingParams(n, max_tokens, temperature))`,
                     as a user would call it (no log-probs, no seeds, text detokenized);
  raw (same params): `LLM.generate` on exactly the requests our backend sends
                     (`VLLMRollout.build_requests`: per-request seeds, logprobs=0, flat
                     log-probs, no detokenization), without our Batch assembly.
The vLLM paths run interleaved (raw plain, raw same, ours, raw plain, ...) for `--repeats`
rounds and the median time is reported: the machine is shared and noisy, and timing one
path after the other lets a burst of load land on one path only.
Targets on CPU: ours >= 0.9x raw vLLM, >= 5x our HF backend.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from verl.rollout.vllm_rollout import VLLMRollout, import_vllm  # noqa: E402

SMOLLM2 = os.path.join(os.path.expanduser("~"), ".cache", "verl", "models", "smollm2-135m-instruct")
PROMPTS = ["Explain reinforcement learning in one sentence.", "What is 17 + 25?", "Write a short poem about the sea.",
           "Tell me a story about a little robot.", "What is the capital of France?",
           "Give three reasons why exercise helps.", "Summarize the following text.", "Hello, how are you today?"]


def resolve_model(name: str) -> str:
    """tiny:ARCH -> a tiny model with head size 32 (vLLM's CPU kernels need >= 32);
    random:smollm2 -> random weights in SmolLM2-135M's shape; anything else is a path."""
    from verl.models.tiny import build_tiny_model, cache_root, tiny_model_path

    if name.startswith("tiny:"):
        arch = name[len("tiny:"):]
        out = os.path.join(cache_root(), "tiny-h128", arch)
        if not os.path.exists(os.path.join(out, "config.json")):
            build_tiny_model(arch, out, hidden=128, pretrain_steps=0)
        return out
    if name == "random:smollm2":
        out = os.path.join(cache_root(), "random-smollm2-135m")
        if not os.path.exists(os.path.join(out, "config.json")):
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

            tok = AutoTokenizer.from_pretrained(tiny_model_path("llama"))  # ids < 512 fit any vocab
            cfg = LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                              head_dim=64, intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192,
                              tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            torch.manual_seed(0)
            AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(out)
            tok.save_pretrained(out)
        return out
    return os.path.expanduser(name)


def prompt_batch(tokenizer, num_prompts: int):
    from verl.batch import Batch

    texts = [PROMPTS[i % len(PROMPTS)] for i in range(num_prompts)]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    return Batch(input_ids=enc.input_ids, attention_mask=enc.attention_mask, prompt_text=texts,
                 group_id=list(range(num_prompts)))


def timed(fn, repeats: int):
    """(last output, median seconds, all seconds) over `repeats` calls."""
    out, times = None, []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times), times


def timed_interleaved(fns: dict, rounds: int):
    """Round-robin timing: every round calls each fn once, in order. Returns
    {name: (last output, median seconds, all seconds)}."""
    outs, times = {}, {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: (outs[name], statistics.median(times[name]), times[name]) for name in fns}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny:llama", help="path, tiny:ARCH, random:smollm2")
    ap.add_argument("--num_prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--max_new_tokens", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds of the vLLM paths (median kept)")
    ap.add_argument("--skip_hf", action="store_true")
    ap.add_argument("--compile", action="store_true", help="let vLLM torch.compile (default on CPU: eager)")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)

    import_vllm()
    import torch
    import vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.config import RolloutConfig
    from verl.rollout.base import SamplingParams
    from verl.rollout.hf_rollout import HFRollout

    path = resolve_model(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    n_seqs = args.num_prompts * args.n
    cfg = RolloutConfig(max_num_seqs=max(n_seqs, 1), kv_cache_gb=1.0, seed=0,
                        max_model_len=prompt_batch(tok, args.num_prompts).input_ids.shape[1] + args.max_new_tokens + 8)
    start = time.perf_counter()
    engine = VLLMRollout(path, tok, cfg, dtype=args.dtype, device=args.device,
                         enforce_eager=False if args.compile else None)
    engine_start_s = time.perf_counter() - start
    engine.extra_sampling_kwargs = {"ignore_eos": True}  # fixed lengths for a fair comparison
    prompts = prompt_batch(tok, args.num_prompts)
    # The trainer's sampling (SamplingParams.from_config): rollout.seed set, so per-request seeds.
    sampling = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=cfg.seed)
    expected_tokens = n_seqs * args.max_new_tokens

    # 1a. raw vLLM as a user calls it: one SamplingParams, no log-probs, no seeds (no Batch)
    mask = prompts.attention_mask.bool()
    raw_prompts = [{"prompt_token_ids": prompts.input_ids[i][mask[i]].tolist()} for i in range(len(prompts))]
    raw_params = vllm.SamplingParams(n=args.n, max_tokens=args.max_new_tokens, temperature=1.0, ignore_eos=True)
    # 1b. raw vLLM on exactly our requests (per-request seeds, logprobs=0, ...): the engine
    # work of our backend minus our Python before/after (request building, Batch assembly)
    same_prompts, same_params = engine.build_requests(prompts, sampling)
    engine.llm.generate(raw_prompts[:2], raw_params, use_tqdm=False)  # warm-up
    engine.generate(prompts.select([0, 1]), sampling)  # warm-up of the log-prob path
    # 2. ours: token ids in, Batch with engine log-probs out
    timings = timed_interleaved({
        "raw_plain": lambda: engine.llm.generate(raw_prompts, raw_params, use_tqdm=False),
        "raw_same": lambda: engine.llm.generate(same_prompts, same_params, use_tqdm=False),
        "ours": lambda: engine.generate(prompts, sampling),
    }, args.repeats)
    raw_out, raw_s, raw_times = timings["raw_plain"]
    same_out, same_s, same_times = timings["raw_same"]
    ours_out, ours_s, ours_times = timings["ours"]
    # Tokens counted from what each path returned (not assumed): generated ids per sequence.
    raw_tokens = sum(len(o.token_ids) for r in raw_out for o in r.outputs)
    same_tokens = sum(len(o.token_ids) for r in same_out for o in r.outputs)
    ours_tokens = int(ours_out.response_mask.sum())

    # 3. weight sync from a Hugging Face copy of the model
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(args.dtype, torch.float32)
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(args.device).eval()
    sync_metrics = [engine.sync_weights(hf_model) for _ in range(3)]
    sync_s = min(m["timing_s/update_weights"] for m in sync_metrics)
    sync_bytes = sync_metrics[0]["rollout/weight_sync_bytes"]

    # 4. our HF backend, same prompts, same fixed length, in its two configurations:
    #    weights in `dtype` (what rollout.hf_weight_copy generates with), and the trainer's
    #    default: the actor's float32 master weights under `dtype` autocast.
    hf_tokens, hf_s = 0, float("nan")
    hf_ac_tokens, hf_ac_s = 0, float("nan")
    if not args.skip_hf:
        hf_model.generation_config.min_new_tokens = args.max_new_tokens
        hf = HFRollout(hf_model, tok, cfg)
        hf.generate(prompts.select([0]), SamplingParams(n=1, max_new_tokens=4))  # warm-up
        hf_out, hf_s, _ = timed(lambda: hf.generate(prompts, sampling), 1)
        hf_tokens = int(hf_out.response_mask.sum())
        if dtype != torch.float32:
            master = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(args.device).eval()
            master.generation_config.min_new_tokens = args.max_new_tokens
            hf_ac = HFRollout(master, tok, cfg, compute_dtype=dtype)
            hf_ac.generate(prompts.select([0]), SamplingParams(n=1, max_new_tokens=4))  # warm-up
            hf_ac_out, hf_ac_s, _ = timed(lambda: hf_ac.generate(prompts, sampling), 1)
            hf_ac_tokens = int(hf_ac_out.response_mask.sum())

    res = {
        "model": args.model, "path": path, "device": args.device, "dtype": args.dtype,
        "num_prompts": args.num_prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
        "expected_tokens": expected_tokens, "torch_threads": torch.get_num_threads(),
        "engine_start_s": engine_start_s,
        "raw_vllm_tokens_per_s": raw_tokens / raw_s, "raw_vllm_tokens": raw_tokens,
        "raw_vllm_same_params_tokens_per_s": same_tokens / same_s, "raw_vllm_same_params_tokens": same_tokens,
        "ours_vllm_tokens_per_s": ours_tokens / ours_s, "ours_vllm_tokens": ours_tokens,
        "hf_tokens_per_s": hf_tokens / hf_s if hf_tokens else None, "hf_tokens": hf_tokens,
        "hf_autocast_tokens_per_s": hf_ac_tokens / hf_ac_s if hf_ac_tokens else None, "hf_autocast_tokens": hf_ac_tokens,
        "weight_sync_s": sync_s, "weight_sync_bytes": sync_bytes,
        "timing": "vLLM paths: median of %d interleaved rounds; HF: one call each" % args.repeats,
        "seconds_per_round": {"raw_plain": raw_times, "raw_same_params": same_times, "ours": ours_times},
    }
    # ours / raw (plain): the headline of issue #3 (what a user of plain vLLM gets);
    # ours / raw (same params): our own overhead on top of the engine work we ask for.
    res["ours_over_raw"] = res["ours_vllm_tokens_per_s"] / res["raw_vllm_tokens_per_s"]
    res["ours_over_raw_same_params"] = res["ours_vllm_tokens_per_s"] / res["raw_vllm_same_params_tokens_per_s"]
    res["ours_over_hf"] = res["ours_vllm_tokens_per_s"] / res["hf_tokens_per_s"] if res["hf_tokens_per_s"] else None
    res["ours_over_hf_autocast"] = (res["ours_vllm_tokens_per_s"] / res["hf_autocast_tokens_per_s"]
                                    if res["hf_autocast_tokens_per_s"] else None)

    rows = [("raw vllm.LLM.generate (plain)", res["raw_vllm_tokens_per_s"], raw_tokens),
            ("raw vllm.LLM.generate (same params)", res["raw_vllm_same_params_tokens_per_s"], same_tokens),
            ("verl VLLMRollout.generate", res["ours_vllm_tokens_per_s"], ours_tokens),
            (f"verl HFRollout.generate ({args.dtype} weights)", res["hf_tokens_per_s"], hf_tokens),
            (f"verl HFRollout.generate (fp32 + autocast)", res["hf_autocast_tokens_per_s"], hf_ac_tokens)]
    print(f"\nmodel {args.model} ({args.dtype}, {args.device}), {args.num_prompts} prompts x n={args.n} x "
          f"{args.max_new_tokens} new tokens, torch threads {res['torch_threads']}, "
          f"vLLM paths: median of {args.repeats} interleaved rounds")
    print(f"{'path':<46}{'tokens/s':>12}{'tokens':>10}")
    for name, tps, toks in rows:
        print(f"{name:<46}{(f'{tps:.0f}' if tps else '-'):>12}{toks:>10}")
    over_hf = f"{res['ours_over_hf']:.1f}x" if res["ours_over_hf"] else "-"
    if res["ours_over_hf_autocast"]:
        over_hf += f" ({args.dtype} weights), {res['ours_over_hf_autocast']:.1f}x (fp32 + autocast, the trainer's default)"
    print(f"ours / raw vLLM (plain): {res['ours_over_raw']:.2f}x   "
          f"ours / raw vLLM (same params): {res['ours_over_raw_same_params']:.2f}x   ours / HF: {over_hf}")
    print(f"weight sync: {sync_s:.3f} s for {sync_bytes / 2**20:.1f} MiB   engine start: {engine_start_s:.1f} s")
    if raw_tokens != expected_tokens or same_tokens != expected_tokens or ours_tokens != expected_tokens:
        print(f"WARNING: a vLLM path returned a token count other than the expected {expected_tokens}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=2)
    return res


if __name__ == "__main__":
    main()
