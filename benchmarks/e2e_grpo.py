"""End-to-end GRPO step throughput: verl against TRL's GRPOTrainer on the same work.

Same model (a real architecture with random weights, so every completion runs to the full
length), same prompts, group size, completion length, sampling (temperature 1, top-p 1),
reward (benchmarks/e2e_reward.py), no KL term (TRL's default beta=0), one optimizer step
per step over all completions, bf16 autocast over float32 master weights (`--dtype`). Each system
runs in its own process; the step time is the median over the timed steps after warm-up.

Systems:
    verl-hf          verl, rollout.name=hf (transformers generate with the actor's module, bf16 autocast
                     over its fp32 weights)
    verl-hf-copy     verl, rollout.name=hf with rollout.hf_weight_copy: generate with an own bf16 copy of
                     the actor, synced in place after every update (sync_s)
    verl-hf-static   the copy plus rollout.cache_implementation=static (a fixed-length static KV cache;
                     transformers compiles the decode step on CUDA). Without the copy a static cache
                     fails under bf16 autocast over fp32 weights: the rotary-embedded keys come out
                     float32, the values bf16, and the static cache takes one dtype
    verl-hf-graph    the copy, the static cache and rollout.decode_loop=verl: verl's own decode loop over the
                     same transformers model (one CUDA graph per decode step) instead of model.generate
    verl-vllm        verl, rollout.name=vllm (in-process vLLM engine, weights synced every step)
    trl              TRL GRPOTrainer, transformers generate (its default), SDPA attention
    trl-eager        TRL with eager attention (model_init_kwargs attn_implementation="eager"), the attention
                     verl picks for bf16 on the CPU (model.attn_implementation auto): there TRL's update runs
                     faster with it (13.7 vs 15.4 s on 11-30) while its generate does not
    trl-static       TRL with cache_implementation="static" (TRL turns generate's compile off; same failure)
    trl-bf16-static  TRL's fastest HF configuration: the model loaded in bf16 (GRPOConfig's
                     model_init_kwargs={"dtype": "bfloat16"}; weights, gradients and AdamW states all
                     bf16) with cache_implementation="static"

tokens/s = (prompt + completion tokens of the step) / step seconds. Columns: rollout_s is
generation (TRL: time inside the model's generate), update_s the policy update (TRL: the
rest of its step), old_logprob_s verl's no-grad forward for pi_old, sync_s the weight sync.

    python benchmarks/e2e_grpo.py --device cpu --tiny                       # seconds
    python benchmarks/e2e_grpo.py --device cpu --systems verl-vllm trl trl-eager --threads 1 \
        --keep-logits --compile --vllm-compile                              # CPU figure (minutes)
    python benchmarks/e2e_grpo.py --device cuda --systems verl-hf verl-hf-copy verl-hf-static verl-hf-graph trl \
        trl-static trl-bf16-static
TRL is imported only by its worker, never by verl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REWARD_FILE = os.path.join(HERE, "e2e_reward.py")
SYSTEMS = ("verl-hf", "verl-hf-copy", "verl-hf-static", "verl-hf-graph", "verl-vllm", "trl", "trl-eager", "trl-static",
           "trl-bf16-static")
# verl HF systems: (rollout.hf_weight_copy, rollout.cache_implementation, rollout.decode_loop)
VERL_HF_ROLLOUT = {"verl-hf": (False, "dynamic", "transformers"), "verl-hf-copy": (True, "dynamic", "transformers"),
                   "verl-hf-static": (True, "static", "transformers"), "verl-hf-graph": (True, "static", "verl")}
RESULT_TAG = "E2E_RESULT "

_WORDS = ("reinforcement learning policy reward model answer question explain number add apple river "
          "mountain quick brown fox jumps over lazy dog story short poem about the sea").split()


def make_prompts(n: int, words: int) -> list[str]:
    """n distinct plain-text prompts of `words` words each (deterministic)."""
    out = []
    for i in range(n):
        ws = [_WORDS[(i * 7 + j * 3 + (i * j) % 5) % len(_WORDS)] for j in range(words)]
        out.append(f"Prompt {i}: " + " ".join(ws) + ".")
    return out


# ---------------------------------------------------------------------------
# Workers (one per process)
# ---------------------------------------------------------------------------


def worker_verl(args) -> dict:
    import torch

    from verl import create_trainer
    from verl.config import config_from_dict

    device = common.resolve_device(args.device)
    total = args.warmup + args.steps
    rollout = "vllm" if args.system == "verl-vllm" else "hf"
    hf_copy, cache, decode_loop = VERL_HF_ROLLOUT.get(args.system, (False, "dynamic", "transformers"))
    cfg = config_from_dict({
        "device": str(device),
        "model": {"name": args.model_path, "dtype": args.dtype, "torch_compile": args.compile,
                  "mixed_precision": "param_copy" if args.param_copy else "autocast"},
        "algorithm": {"name": "grpo", "use_kl_loss": False, "loss_agg_mode": "token-mean"},
        "rollout": {"name": rollout, "n": args.group, "max_new_tokens": args.max_new_tokens, "temperature": 1.0,
                    "top_p": 1.0, "top_k": 0, "max_num_seqs": max(64, args.prompts * args.group),
                    "gpu_memory_utilization": 0.3, "kv_cache_gb": 1.0, "enable_sleep_mode": False,
                    "enforce_eager": False if args.vllm_compile else None,
                    "hf_weight_copy": hf_copy, "cache_implementation": cache, "decode_loop": decode_loop},
        "training": {"total_steps": total + 10, "batch_size": args.prompts, "micro_batch_size": args.micro_batch,
                     "lr": 1e-6, "use_packed_samples": args.packed, "logprob_chunk_size": 4096,
                     "logprob_keep_logits": args.keep_logits},
        "reward_fn": {"type": "python", "function": f"{REWARD_FILE}:reward"},
        "data": {"prompts": make_prompts(args.prompts * (total + 1), args.prompt_words), "apply_chat_template": False,
                 "max_prompt_length": 1024, "shuffle": False, "baseline_prompt": None},
        "logging": {"backends": [], "progress_bar": False},
        "checkpoint": {"save_dir": tempfile.mkdtemp(prefix="verl-bench-")},
    })
    trainer = create_trainer(cfg)
    if rollout == "vllm":
        trainer.rollout.extra_sampling_kwargs = {"ignore_eos": True}
    else:  # the module that generates (the actor's, or the copy, which shares its generation config)
        trainer.rollout.model.generation_config.min_new_tokens = args.max_new_tokens  # fixed lengths, as ignore_eos
    steps = []
    for i in range(total):
        t0 = time.perf_counter()
        m = trainer.step()
        wall = time.perf_counter() - t0
        steps.append(dict(step=i, wall_s=wall, tokens=m["perf/total_tokens"],
                          completion_len=m["response_length/mean"],
                          stages={k.split("/", 1)[1]: round(v, 3) for k, v in m.items() if k.startswith("timing_s/")}))
    del trainer
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return dict(steps=steps)


def worker_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, HERE)
    from e2e_reward import trl_reward

    device = common.resolve_device(args.device)
    total = args.warmup + args.steps
    tok = AutoTokenizer.from_pretrained(args.model_path)
    tok.padding_side = "left"
    # TRL loads the model itself (model_init_kwargs): fp32 master weights, or bf16 weights for trl-bf16-static.
    bf16_weights = args.system == "trl-bf16-static"
    model_init_kwargs = {"dtype": "bfloat16" if bf16_weights else "float32",
                         "attn_implementation": "eager" if args.system == "trl-eager" else "sdpa"}
    prompts = make_prompts(args.prompts * (total + 1), args.prompt_words)
    steps: list[dict] = []
    gen_s = [0.0]

    def time_generate(model):  # TRL calls the model's own generate: time its rollout part
        generate = model.generate

        def timed_generate(*a, **kw):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = generate(*a, **kw)
            if device.type == "cuda":
                torch.cuda.synchronize()
            gen_s[0] += time.perf_counter() - t0
            return out

        model.generate = timed_generate

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if device.type == "cuda":
                torch.cuda.synchronize()
            gen_s[0] = 0.0
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            if device.type == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - self.t0
            steps.append(dict(step=len(steps), wall_s=wall, stages={"rollout": gen_s[0], "rest": wall - gen_s[0]}))

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and steps and "completions/mean_length" in logs:
                steps[-1]["completion_len"] = logs["completions/mean_length"]

    n = args.prompts * args.group
    conf = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), per_device_train_batch_size=n, num_generations=args.group,
        gradient_accumulation_steps=1, max_completion_length=args.max_new_tokens, learning_rate=1e-6,
        max_steps=total, logging_steps=1, report_to="none", save_strategy="no", seed=0, beta=0.0,
        temperature=1.0, top_p=1.0, top_k=0, shuffle_dataset=False, disable_tqdm=True,
        generation_kwargs={"min_new_tokens": args.max_new_tokens},
        cache_implementation="static" if args.system in ("trl-static", "trl-bf16-static") else None,
        bf16=bf16_weights or args.dtype == "bfloat16", use_cpu=device.type == "cpu", dataloader_num_workers=0,
        model_init_kwargs=model_init_kwargs)
    trainer = GRPOTrainer(model=args.model_path, reward_funcs=trl_reward, args=conf,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tok,
                          callbacks=[Timer()])
    time_generate(trainer.model)
    trainer.train()
    prompt_tokens = statistics.mean(len(tok(p)["input_ids"]) for p in prompts[:n])
    for s in steps:
        s["tokens"] = n * (prompt_tokens + s.get("completion_len", args.max_new_tokens))
    return dict(steps=steps)


def summarize(system: str, result: dict, args) -> dict:
    steps = result["steps"][args.warmup:]
    wall = statistics.median(s["wall_s"] for s in steps)
    tokens = statistics.median(s["tokens"] for s in steps)
    row = dict(system=system, step_s=round(wall, 3), tokens_per_step=round(tokens), tokens_per_s=round(tokens / wall),
               completion_len=round(statistics.median(s.get("completion_len", 0) for s in steps), 1))
    if steps and steps[0].get("stages"):  # verl: median seconds of each stage of the step
        names = steps[0]["stages"].keys()
        med = {k: round(statistics.median(s["stages"].get(k, 0.0) for s in steps), 3) for k in names}
        row.update(rollout_s=med.get("rollout"), old_logprob_s=med.get("old_log_prob"),
                   update_s=med.get("update_actor", med.get("rest")), sync_s=med.get("update_weights"), stages=med)
    return row


def run_all(args) -> list[dict]:
    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    cache = args.cache or os.path.join(tempfile.gettempdir(), "verl-bench-models")
    args.model_path = common.save_random_model(args.arch, os.path.join(cache, args.arch))
    rows = []
    for system in args.systems:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", system, "--model-path", args.model_path,
               "--device", args.device, "--arch", args.arch, "--prompts", str(args.prompts), "--group", str(args.group),
               "--max-new-tokens", str(args.max_new_tokens), "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--prompt-words", str(args.prompt_words), "--micro-batch", str(args.micro_batch),
               "--dtype", args.dtype]
        cmd += [flag for flag, on in (("--packed", args.packed), ("--keep-logits", args.keep_logits),
                                      ("--compile", args.compile), ("--vllm-compile", args.vllm_compile),
                                      ("--param-copy", args.param_copy)) if on]
        t0 = time.time()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([common.ROOT, os.environ.get("PYTHONPATH", "")]))
        if args.threads:
            # Same thread count for every system; vLLM must not pin its own threads to all cores.
            env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                       VLLM_CPU_OMP_THREADS_BIND="nobind")
            cmd += ["--threads", str(args.threads)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
            if proc.returncode != 0 or not lines:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                rows.append(dict(system=system, error=f"exit {proc.returncode}: {' | '.join(tail)[-300:]}"))
            else:
                rows.append(summarize(system, json.loads(lines[-1][len(RESULT_TAG):]), args))
        except subprocess.TimeoutExpired:
            rows.append(dict(system=system, error=f"timeout after {args.timeout}s"))
        rows[-1]["process_s"] = round(time.time() - t0, 1)
        print(json.dumps(rows[-1]), flush=True)
        _report(args, info, rows, quiet=True)
    _report(args, info, rows)
    return rows


def verl_options(args) -> str:
    """The verl speed options this run turned on, by config key."""
    on = [key for key, flag in (("training.use_packed_samples", args.packed),
                                ("training.logprob_keep_logits", args.keep_logits),
                                ("model.torch_compile", args.compile),
                                ("rollout.enforce_eager: false", args.vllm_compile),
                                ("model.mixed_precision: param_copy", args.param_copy)) if flag]
    return ", ".join(on) or "defaults"


def _report(args, info, rows, quiet=False):
    trl_rows = [r for r in rows if r["system"].startswith("trl") and "tokens_per_s" in r]
    best_trl = max(trl_rows, key=lambda r: r["tokens_per_s"]) if trl_rows else None
    default_trl = next((r for r in trl_rows if r["system"] == "trl"), best_trl)
    for r in rows:
        if "tokens_per_s" in r and default_trl:
            r["x_trl"] = round(r["tokens_per_s"] / default_trl["tokens_per_s"], 2)
        if "tokens_per_s" in r and best_trl:
            r["x_best_trl"] = round(r["tokens_per_s"] / best_trl["tokens_per_s"], 2)
    cols = ["system", "step_s", "tokens_per_step", "tokens_per_s", "x_trl", "x_best_trl", "completion_len",
            "rollout_s", "old_logprob_s", "update_s", "sync_s", "error"]
    notes = (f"GRPO, {args.arch} architecture (random weights, {common.param_count(args.arch) / 1e6:.0f}M parameters), "
             f"{args.prompts} prompts x {args.group} samples = {args.prompts * args.group} completions of "
             f"{args.max_new_tokens} tokens per step, one optimizer step per step, no KL, {args.dtype} compute "
             f"(autocast over fp32 master weights; verl-hf-copy/-static generate with a {args.dtype} copy, "
             f"trl-bf16-static trains bf16 weights), {args.threads or 'default'} CPU threads; median of {args.steps} "
             f"steps after {args.warmup} warm-up. x_trl = tokens/s over TRL's default configuration; "
             f"x_best_trl = over the fastest TRL configuration run. verl options: {verl_options(args)}; "
             f"attention per model.attn_implementation auto (eager for bf16 on the CPU, else SDPA).")
    common.write_results(args.out, "e2e_grpo", info, rows, cols, extra=dict(args=dict(vars(args))), notes=notes,
                         quiet=quiet)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--arch", default="smollm2-135m", choices=sorted(common.ARCHS))
    ap.add_argument("--systems", nargs="+", default=None, choices=SYSTEMS)
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step")
    ap.add_argument("--group", type=int, default=None, help="samples per prompt (GRPO group)")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--prompt-words", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=None, help="verl micro_batch_size (default: all)")
    ap.add_argument("--packed", action="store_true", help="verl: training.use_packed_samples")
    ap.add_argument("--keep-logits", action="store_true", help="verl: training.logprob_keep_logits")
    ap.add_argument("--compile", action="store_true",
                    help="verl: model.torch_compile (the warm-up step pays the compile time)")
    ap.add_argument("--param-copy", action="store_true",
                    help="verl: model.mixed_precision param_copy (bf16 copy of the fp32 master weights)")
    ap.add_argument("--vllm-compile", action="store_true",
                    help="verl-vllm: rollout.enforce_eager false on the CPU too (engine start pays the compile)")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads per system (0: PyTorch's default). 1 keeps timings sane on a busy machine, "
                         "where two threads wait on each other at every op")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="compute dtype of both trainers: bf16 autocast over fp32 master weights, or fp32")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per system")
    ap.add_argument("--cache", default=None, help="where the random model folder is kept")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model-path", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cuda = common.resolve_device(args.device).type == "cuda"
    if args.tiny:
        args.arch = "tiny-llama"
        defaults = dict(prompts=2, group=4, max_new_tokens=16, systems=["verl-hf", "trl"])
    elif cuda:
        defaults = dict(prompts=16, group=8, max_new_tokens=256, systems=["verl-hf", "trl"])
    else:
        defaults = dict(prompts=4, group=4, max_new_tokens=64, systems=["verl-vllm", "verl-hf", "trl"])
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.micro_batch is None:
        args.micro_batch = args.prompts * args.group
    return args


if __name__ == "__main__":
    a = parse()
    if a.worker and a.threads:
        import torch

        torch.set_num_threads(a.threads)
    if a.worker:
        a.system = a.worker
        res = worker_trl(a) if a.worker.startswith("trl") else worker_verl(a)
        print(RESULT_TAG + json.dumps(res), flush=True)
    else:
        run_all(a)
