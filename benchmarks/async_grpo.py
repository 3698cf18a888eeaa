"""Synchronous against asynchronous training on the same work: seconds per step and throughput of
`async_training.max_staleness` 1 and 2 next to the synchronous loop, measured in one process.

    python benchmarks/async_grpo.py --device cpu --threads 1 --steps 6            # tiny GPT-2, seconds a step
    python benchmarks/async_grpo.py --device cuda --model MODEL --engine vllm --prompts 32 --group 8 \\
        --max-new-tokens 1024 --steps 8                                            # the H200 run of issue 21

Response lengths: sampled with a stop string (one sentence) under a large max_new_tokens, so they
vary widely; the table gives their median and maximum per system. Each system is a fresh trainer
with the same seed, timed over `--steps` after `--warmup` steps (the wall time between step
returns: for async this includes waiting for the producer). The asynchronous systems generate with
an engine of their own (the HF weight copy, or vLLM), the synchronous one with its default.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

import common

SYSTEMS = ("sync", "async-k1", "async-k2")


def _overrides(args, system: str, out: str) -> list[str]:
    o = {"model.name": args.model, "rollout.name": args.engine, "device": args.device, "algorithm.name": "grpo",
         "rollout.n": args.group, "training.batch_size": args.prompts, "training.total_steps": args.warmup + args.steps,
         "rollout.max_new_tokens": args.max_new_tokens, "rollout.stop": "['.']", "training.lr": 1e-5,
         "logging.backends": "[jsonl]", "logging.progress_bar": "false", "checkpoint.save_dir": out,
         "data.baseline_prompt": "null", "training.micro_batch_size": args.prompts * args.group}
    if system != "sync":
        o.update({"async_training.enable": "true", "async_training.max_staleness": int(system[-1])})
        if args.engine == "hf":
            o["rollout.hf_weight_copy"] = "true"
    return [f"{k}={v}" for k, v in o.items()]


def run_system(args, system: str) -> dict:
    from verl import create_trainer, load_config

    cfg = load_config(None, _overrides(args, system, tempfile.mkdtemp(prefix=f"async-bench-{system}-")))
    trainer = create_trainer(cfg)
    seconds, tokens, lengths = [], [], []
    try:
        last = time.perf_counter()
        for k in range(args.warmup + args.steps):
            m = trainer.step()
            now = time.perf_counter()
            if k >= args.warmup:
                seconds.append(now - last)
                tokens.append(m["perf/total_tokens"])
                b = trainer._last_batch
                lengths += b.attention_mask[:, b.prompt_length:].sum(dim=1).tolist()
            last = now
    finally:
        trainer.hooks.close()
    step_s = statistics.median(seconds)
    return {"system": system, "step_s": round(step_s, 3), "tokens_per_s": round(statistics.median(tokens) / step_s),
            "resp_len_median": statistics.median(lengths), "resp_len_max": max(lengths),
            "staleness_max": m.get("async/staleness_max", 0.0)}


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", "threads", "out", model={"default": "tiny:gpt2"},
                           max_new_tokens={"default": 64})
    ap.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rows = [run_system(args, s) for s in args.systems]
    base = next((r for r in rows if r["system"] == "sync"), None)
    for r in rows:
        r["x_sync"] = round(r["tokens_per_s"] / base["tokens_per_s"], 2) if base else None
    info = common.machine_info(common.resolve_device(args.device))
    cmd = "python3 benchmarks/async_grpo.py " + " ".join(sys.argv[1:] if argv is None else argv)
    common.write_results(args.out or "benchmarks/results", "async_grpo", info, rows,
                         ["system", "step_s", "tokens_per_s", "x_sync", "resp_len_median", "resp_len_max",
                          "staleness_max"], extra={"command": cmd},
                         notes=f"GRPO, {args.model} on {args.engine}, {args.prompts} prompts x {args.group} samples, "
                               f"up to {args.max_new_tokens} new tokens (stop at '.'), median of {args.steps} steps "
                               f"after {args.warmup} warm-up.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
