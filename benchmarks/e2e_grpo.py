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
    verl-vllm        verl, rollout.name=vllm (in-process vLLM engine, weights synced every step), everything
                     else at verl's defaults unless a verl flag below is given (micro-batching, packing,
                     sleep mode, memory fraction, log-prob chunking: the defaults decide)
    verl-sglang      verl, rollout.name=sglang (in-process SGLang engine, weights synced every step through CUDA
                     IPC), defaults otherwise as verl-vllm. SGLang and vLLM pin conflicting packages: give
                     this system its own package folder with --sglang-pythonpath (it replaces the others)
    trl-vllm         TRL GRPOTrainer with use_vllm=True, vllm_mode="colocate" (its fast path on a GPU), all
                     else at TRL's defaults (gradient checkpointing on, vLLM at 0.3 of the GPU memory,
                     one micro-batch of all completions as per_device_train_batch_size); completions run to
                     the full length through vLLM's ignore_eos, as verl's do
    trl              TRL GRPOTrainer, transformers generate (its default), SDPA attention
    trl-eager        TRL with eager attention (model_init_kwargs attn_implementation="eager"), the attention
                     verl picks for bf16 on the CPU (model.attn_implementation auto): there TRL's update runs
                     faster with it (13.7 vs 15.4 s on 11-30) while its generate does not
    trl-static       TRL with cache_implementation="static" (TRL turns generate's compile off; same failure)
    trl-bf16-static  TRL's fastest HF configuration: the model loaded in bf16 (GRPOConfig's
                     model_init_kwargs={"dtype": "bfloat16"}; weights, gradients and AdamW states all
                     bf16) with cache_implementation="static"

    real-verl        the real verl (PyPI `verl` 0.9.1 by volcengine, not this repository) on the same work
                     through its own CLI, `python3 -m verl.trainer.main_ppo` + Hydra overrides
                     (`real_verl_overrides`, benchmarks/e2e_real_verl.py): vLLM 0.24.0 rollout (async server,
                     CUDA graphs, ignore_eos; no engine sleep at (a), asleep during the update with
                     --real-verl-token-budget, works (b)/(c)), FSDP actor with one dynamic micro-batch of a step's tokens
                     (or of the budget's), no reference model. Its packages (130 wheels, 988 MiB, Python 3.12: verl[vllm]==0.9.1 with vllm 0.24.0,
                     transformers 5.9.0, ray 2.60.0, transferqueue, hydra-core 1.3.8; staged in
                     .gpuwheels-realverl, installed by benchmarks/h200_run.sh realverl-install) live in their own
                     folder, --real-verl-pythonpath, which is the ONLY entry of that process's PYTHONPATH (its
                     package is also called `verl`); it runs from a temporary folder, never this checkout.
                     Step time and stages come from its console logger (timing_s/step; timing_s/gen ->
                     rollout_s, update_actor, update_weights -> sync_s). Ran on the H200 on 2026-12-02 (work (a):
                     9.95 s/step against verl's 1.15); CPU-tested in tests/benchmarks/test_bench_real_verl.py (parquet
                     files, reward, override line, log parsing); the
                     real-verl facts it relies on are read from the verl-0.9.1 wheel's sources, named beside
                     `real_verl_overrides`. flash-attn has no PyPI wheel, so the actor runs SDPA attention
                     without remove-padding; --real-verl-set appends Hydra overrides to try other settings

tokens/s = (prompt + completion tokens of the step) / step seconds. Columns: rollout_s is
generation (TRL: time inside the model's generate, or inside its vLLM generate), update_s the
policy update (TRL: the rest of its step), old_logprob_s verl's no-grad forward for pi_old,
sync_s the weight sync (TRL+vLLM: its sync_weights). x_trl_vllm = tokens/s over trl-vllm's. verl on vLLM or
SGLang: engine_call_s is the part of rollout_s inside the engine's own generate call, around_engine_s verl's
work around it (requests, results, the Batch); the rest of rollout_s is scoring and the step's bookkeeping.

    python benchmarks/e2e_grpo.py --device cpu --tiny                       # seconds
    python benchmarks/e2e_grpo.py --device cpu --systems verl-vllm trl trl-eager --threads 1 \
        --keep-logits --compile --vllm-compile                              # CPU figure (minutes)
    python benchmarks/e2e_grpo.py --device cuda --systems verl-hf verl-hf-copy verl-hf-static verl-hf-graph trl \
        trl-static trl-bf16-static
    python benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --prompts 16 --group 8 \
        --max-new-tokens 128                                                # (a) H200, vLLM on both sides
    python benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --arch qwen2-1.5b --prompts 32 \
        --group 8 --max-new-tokens 512                                      # (b)
    python benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --arch qwen2-7b --lora-rank 16 \
        --prompts 16 --group 8 --max-new-tokens 512                         # (c) LoRA
    python benchmarks/e2e_grpo.py --device cuda --systems real-verl verl-vllm --prompts 16 --group 8 \
        --max-new-tokens 128 --real-verl-pythonpath /tmp/realverl          # (a) against the real verl
    python benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --arch qwen2-1.5b --prompts 32 \
        --group 8 --max-new-tokens 512 --work defaults like-for-like --trl-micro-batch 32 --trl-gen-probe 3
                                                                            # (b), both rows per peer
    python benchmarks/e2e_grpo.py --device cuda --systems verl-vllm trl-vllm --arch qwen2-1.5b --prompts 32 \
        --group 8 --max-new-tokens 512 --work like-for-like --lengths realistic --prompt-words 48
                                                                            # (b), realistic lengths
    python benchmarks/e2e_report.py merge run1/e2e_grpo.json run2/e2e_grpo.json --out merged/   # two machine starts

Work modes (--work, benchmarks/e2e_work.py): `defaults` runs each system at its own defaults; `like-for-like` sets
the same work on every side (engine log-probs every step, no IS correction, pi_old from the update's forward, no
gradient checkpointing, TRL micro-batches of --trl-micro-batch, real verl with bypass mode, FSDP2, fused kernels).
Every row carries a `caption` saying what its system computed, ratios compare rows of one work mode, and each row
gives the median of --steps timed steps (default 5) with their min, max and IQR. Lengths (--lengths, a run's own
axis beside the work mode, benchmarks/e2e_work.py): `fixed` runs every completion to --max-new-tokens; `realistic`
stops them at EOS under one logit bias on both sides, calibrated for a median of a quarter of the maximum
(benchmarks/eos_probe.py; vLLM systems only), with prompts of a quarter to all of --prompt-words words. Floors
(benchmarks/floor.py): every row gives the share of its stages' floors on the card it reaches (gen_floor_pct,
update_mfu_pct = the update's MFU, sync_floor_pct). TRL's like-for-like micro-batch is sized to the card on a GPU
(benchmarks/trl_memory.py) unless --trl-micro-batch sets it. Modules: e2e_trl.py (the TRL
worker), e2e_real_verl.py (real verl), e2e_report.py (rows, ratios, table, merge), trl_generation_probe.py
(TRL's engine call replayed in its own process). TRL is imported only by its worker, never by verl.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import e2e_report  # noqa: E402
import e2e_work  # noqa: E402
import lengths  # noqa: E402
from e2e_real_verl import real_verl_notes, worker_real_verl  # noqa: E402
from e2e_report import summarize  # noqa: E402,F401  (the row builder; tests read it from here)
from e2e_trl import worker_trl  # noqa: E402  (imports TRL only when called)

HERE = os.path.dirname(os.path.abspath(__file__))
REWARD_FILE = os.path.join(HERE, "e2e_reward.py")
SYSTEMS = ("verl-hf", "verl-hf-copy", "verl-hf-static", "verl-hf-graph", "verl-vllm", "verl-sglang", "real-verl",
           "trl-vllm", "trl", "trl-eager", "trl-static", "trl-bf16-static")
# verl HF systems: (rollout.hf_weight_copy, rollout.cache_implementation, rollout.decode_loop)
VERL_HF_ROLLOUT = {"verl-hf": (False, "dynamic", "transformers"), "verl-hf-copy": (True, "dynamic", "transformers"),
                   "verl-hf-static": (True, "static", "transformers"), "verl-hf-graph": (True, "static", "verl")}
RESULT_TAG = "E2E_RESULT "

_WORDS = ("reinforcement learning policy reward model answer question explain number add apple river "
          "mountain quick brown fox jumps over lazy dog story short poem about the sea").split()


def make_prompts(n: int, words: int, varied: bool = False) -> list[str]:
    """n distinct plain-text prompts of `words` words each, or with `varied` (--lengths realistic) of
    lengths.prompt_word_count(i, words) words, a quarter to all of them (deterministic either way)."""
    out = []
    for i in range(n):
        k = lengths.prompt_word_count(i, words) if varied else words
        ws = [_WORDS[(i * 7 + j * 3 + (i * j) % 5) % len(_WORDS)] for j in range(k)]
        out.append(f"Prompt {i}: " + " ".join(ws) + ".")
    return out


def step_prompts(args) -> list[str]:
    """Every prompt of a run (its steps and one spare batch), the same list in every worker."""
    return make_prompts(args.prompts * (args.warmup + args.steps + 1), args.prompt_words,
                        varied=getattr(args, "lengths", "fixed") == "realistic")


# ---------------------------------------------------------------------------
# Workers (one per process)
# ---------------------------------------------------------------------------


def worker_verl(args) -> dict:
    import torch

    from verl import create_trainer
    from verl.config import config_from_dict

    device = common.resolve_device(args.device)
    total = args.warmup + args.steps
    cfg = config_from_dict(verl_config(args, device, total))
    trainer = create_trainer(cfg)
    rollout = cfg.rollout.name
    if rollout in ("vllm", "sglang"):  # where completions end, as TRL's (ignore_eos, or realistic lengths' bias)
        trainer.rollout.extra_sampling_kwargs = e2e_work.stop_kwargs(args.eos_bias, args.eos_id)
    else:  # the module that generates (the actor's, or the copy, which shares its generation config)
        trainer.rollout.model.generation_config.min_new_tokens = args.max_new_tokens  # fixed lengths, as ignore_eos
    steps = []
    for i in range(total):
        t0 = time.perf_counter()
        m = trainer.step()
        wall = time.perf_counter() - t0
        steps.append(dict(step=i, wall_s=wall, tokens=m["perf/total_tokens"],
                          completion_len=m["response_length/mean"],
                          stages={k.split("/", 1)[1]: round(v, 3) for k, v in m.items() if k.startswith("timing_s/")},
                          engine={k: round(v, 3) for k, v in m.items() if k.startswith("rollout/") and
                                  isinstance(v, (int, float))},
                          # per stage (verl/trainer/stage_memory.py): the trainer resets torch's peak counter
                          memory={k.split("/", 1)[1]: round(v, 2) for k, v in m.items() if k.startswith("memory_gb/")},
                          peak_gib=round(m["memory_gb/step"], 2) if "memory_gb/step" in m else common.peak_gib(device),
                          lengths=batch_lengths(trainer.run.last_batch)))
    del trainer
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return dict(steps=steps)


def batch_lengths(batch) -> list[list[int]]:
    """[prompt tokens, response tokens] of each sequence of a step's Batch (left-padded prompts, right-padded
    responses: the attention mask's ones on each side of prompt_length)."""
    p = batch.attention_mask[:, :batch.prompt_length].sum(dim=1).tolist()
    r = batch.attention_mask[:, batch.prompt_length:].sum(dim=1).tolist()
    return [[int(a), int(b)] for a, b in zip(p, r)]


def verl_config(args, device, total: int) -> dict:
    """The work (model, algorithm, sampling, batch, reward, data) plus only the verl options a
    flag asked for: every other key keeps verl's default (micro-batching, packing, sleep mode,
    vLLM memory fraction, log-prob chunking). rollout.max_num_seqs is the batch's sequence count,
    as TRL sizes its engine (verl's default 64 would split a step's generation into waves)."""
    rollout = {"verl-vllm": "vllm", "verl-sglang": "sglang"}.get(args.system, "hf")
    hf_copy, cache, decode_loop = VERL_HF_ROLLOUT.get(args.system, (False, "dynamic", "transformers"))
    model = {"name": args.model_path, "dtype": args.dtype}
    training = {"total_steps": total + 10, "batch_size": args.prompts, "lr": 1e-6}
    rollout_cfg = {"name": rollout, "n": args.group, "max_new_tokens": args.max_new_tokens, "temperature": 1.0,
                   "top_p": 1.0, "top_k": 0, "max_num_seqs": args.prompts * args.group}
    if rollout == "hf":
        rollout_cfg.update(hf_weight_copy=hf_copy, cache_implementation=cache, decode_loop=decode_loop)
    for on, section, key, value in ((args.compile, model, "torch_compile", True),
                                    (args.param_copy, model, "mixed_precision", "param_copy"),
                                    (args.lora_rank, model, "lora", {"rank": args.lora_rank, "alpha": 2 * args.lora_rank}),
                                    (args.micro_batch, training, "micro_batch_size", args.micro_batch),
                                    (args.packed, training, "use_packed_samples", True),
                                    (args.keep_logits, training, "logprob_keep_logits", True),
                                    (args.vllm_compile, rollout_cfg, "enforce_eager", False)):
        if on:
            section[key] = value
    sections = {"model": model, "training": training, "rollout": rollout_cfg}
    for key, value in e2e_work.verl_settings(getattr(args, "work", "defaults"),
                                             getattr(args, "lengths", "fixed")).items():  # the work's keys
        section_name, _, leaf = key.partition(".")
        sections[section_name][leaf] = value
    for item in args.verl_set or []:  # --verl-set rollout.enable_sleep_mode=false ... (after the work's: they win)
        key, _, value = item.partition("=")
        section_name, _, leaf = key.partition(".")
        sections[section_name][leaf] = yaml_value(value)
    return {
        "device": str(device),
        "model": model,
        "algorithm": {"name": "grpo", "use_kl_loss": False, "loss_agg_mode": "token-mean"},
        "rollout": rollout_cfg,
        "training": training,
        "reward_fn": {"type": "python", "function": f"{REWARD_FILE}:reward"},
        "data": {"prompts": step_prompts(args), "apply_chat_template": False,
                 "max_prompt_length": 1024, "shuffle": False, "baseline_prompt": None},
        "logging": {"backends": [], "progress_bar": False},
        "checkpoint": {"save_dir": tempfile.mkdtemp(prefix="verl-bench-")},
    }


def yaml_value(text: str):
    import yaml

    return yaml.safe_load(text)


def worker_command(args, system: str, work: str) -> list[str]:
    """The worker process's command line for one (system, work) row."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", system, "--work", work, "--model-path",
           args.model_path, "--device", args.device, "--arch", args.arch, "--prompts", str(args.prompts), "--group",
           str(args.group), "--max-new-tokens", str(args.max_new_tokens), "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--prompt-words", str(args.prompt_words),
           "--dtype", args.dtype, "--lora-rank", str(args.lora_rank), "--lengths", args.lengths]
    cmd += ["--eos-bias", repr(args.eos_bias), "--eos-id", str(args.eos_id)] if args.eos_bias is not None else []
    cmd += ["--micro-batch", str(args.micro_batch)] if args.micro_batch else []
    cmd += [flag for flag, on in (("--packed", args.packed), ("--keep-logits", args.keep_logits),
                                  ("--compile", args.compile), ("--vllm-compile", args.vllm_compile),
                                  ("--param-copy", args.param_copy)) if on]
    cmd += ["--verl-set", *args.verl_set] if args.verl_set else []
    cmd += ["--timeout", str(args.timeout)]
    if system.startswith("trl"):
        cmd += ["--trl-micro-batch", str(args.trl_micro_batch)] if args.trl_micro_batch else []
        cmd += ["--trl-gen-probe", str(args.trl_gen_probe)] if args.trl_gen_probe and system == "trl-vllm" else []
    if system == "real-verl":
        cmd += ["--real-verl-pythonpath", args.real_verl_pythonpath] if args.real_verl_pythonpath else []
        cmd += ["--real-verl-set", *args.real_verl_set] if args.real_verl_set else []
        cmd += ["--real-verl-token-budget", str(args.real_verl_token_budget)] if args.real_verl_token_budget else []
        # its whole console log and command land there, one folder per work mode
        cmd += ["--logs", os.path.join(args.logs, f"real_verl_{work}")] if args.logs else []
    cmd += ["--threads", str(args.threads)] if args.threads else []
    return cmd


def run_all(args) -> list[dict]:
    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    cache = args.cache or os.path.join(tempfile.gettempdir(), "verl-bench-models")
    args.model_path = common.save_random_model(args.arch, os.path.join(cache, args.arch))
    if args.lengths == "realistic":
        calibrate_stops(args, device)
    if device.type == "cuda" and args.trl_micro_batch is None and "like-for-like" in args.work \
            and any(s.startswith("trl") for s in args.systems):
        size_trl_micro_batch(args, device)
    rows = []
    for work in args.work:
        for system in args.systems:
            rows.append(run_worker(args, system, work))
            print(json.dumps(rows[-1]), flush=True)
            _report(args, info, rows, quiet=True)
    _report(args, info, rows)
    return rows


def calibrate_stops(args, device) -> None:
    """--lengths realistic: the EOS logit bias both sides get (benchmarks/eos_probe.py), unless --eos-bias
    gave one; kept in args (the result JSON) with the probe's prediction."""
    if args.eos_bias is None:
        import eos_probe

        args.eos_calibration = eos_probe.calibrate(args.model_path, str(device), args.max_new_tokens,
                                                   prompt_token_ids(args))
        args.eos_bias, args.eos_id = args.eos_calibration["eos_bias"], args.eos_calibration["eos_id"]
    elif args.eos_id is None:
        from transformers import AutoConfig

        eos = AutoConfig.from_pretrained(args.model_path).eos_token_id
        args.eos_id = eos if isinstance(eos, int) else eos[0]
    print(f"realistic lengths: EOS {args.eos_id} logit bias {args.eos_bias}"
          + (f", predicted {args.eos_calibration['predicted']}" if getattr(args, "eos_calibration", None) else ""),
          flush=True)


def prompt_token_ids(args) -> list[list[int]]:
    """The run's prompts as the model's tokenizer encodes them (as both sides' engines get them: no chat
    template, no special tokens added by the synthetic tokenizer)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model_path)
    return [tok(p)["input_ids"] for p in step_prompts(args)]


def size_trl_micro_batch(args, device) -> None:
    """TRL's like-for-like micro-batch from the card's memory (benchmarks/trl_memory.py), unless
    --trl-micro-batch gave one; the estimate is kept in args.trl_micro_batch_sizing."""
    import dataclasses

    import torch

    import floor
    import trl_memory

    cfg = common.hf_config(args.arch)
    longest_prompt = max(len(ids) for ids in prompt_token_ids(args))
    lora_params = args.lora_rank * floor.lora_width(cfg)
    base = e2e_work.trl_weight_dtype("like-for-like", "trl-vllm", bool(args.lora_rank))
    sizing = trl_memory.micro_batch(
        torch.cuda.get_device_properties(device).total_memory, args.prompts * args.group,
        longest_prompt + args.max_new_tokens, args.max_new_tokens,
        trl_memory.activation_bytes_per_token(cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size),
        cfg.vocab_size, trl_memory.states_bytes(common.param_count(args.arch), lora_params, base))
    args.trl_micro_batch = sizing.micro_batch
    args.trl_micro_batch_sizing = dict(dataclasses.asdict(sizing), longest_prompt=longest_prompt)
    print(f"TRL micro-batch sized to the card: {sizing}", flush=True)


def run_worker(args, system: str, work: str) -> dict:
    """One (system, work) row: the worker in its own process, under --timeout."""
    cmd = worker_command(args, system, work)
    t0 = time.time()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([common.ROOT, os.environ.get("PYTHONPATH", "")]))
    if system == "verl-sglang" and args.sglang_pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([common.ROOT, args.sglang_pythonpath])
    if system == "trl-vllm":  # TRL's colocated vLLM starts a one-process torch.distributed group
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    if args.threads:
        # Same thread count for every system; vLLM must not pin its own threads to all cores.
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                   VLLM_CPU_OMP_THREADS_BIND="nobind")
    caption = e2e_work.caption(system, work, args.trl_micro_batch, args.prompts * args.group, bool(args.lora_rank),
                               args.lengths, args.eos_bias)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
        if proc.returncode != 0 or not lines:
            row = dict(system=system, error=common.failure_summary(proc.returncode, proc.stderr, proc.stdout))
            if args.logs:  # the whole stderr of a failed system, for the record
                os.makedirs(args.logs, exist_ok=True)
                with open(os.path.join(args.logs, f"e2e_{system}_{work}.stderr.txt"), "w") as fh:
                    fh.write(proc.stderr[-200_000:])
        else:
            result = json.loads(lines[-1][len(RESULT_TAG):])
            row = summarize(system, result, args)
            if "version" in result:  # real-verl: the PyPI verl it ran, and its exit status when not 0
                row["version"] = result["version"]
                row.update({"exit": result["exit"]} if result.get("exit") != 0 else {})
    except subprocess.TimeoutExpired:
        row = dict(system=system, error=f"timeout after {args.timeout}s")
    row.update(work=work, caption=caption, process_s=round(time.time() - t0, 1))
    return row


def verl_options(args) -> str:
    """The verl options this run set, by config key (all others at verl's defaults)."""
    on = [key for key, flag in ((f"training.micro_batch_size: {args.micro_batch}", args.micro_batch),
                                ("training.use_packed_samples", args.packed),
                                ("training.logprob_keep_logits", args.keep_logits),
                                ("model.torch_compile", args.compile),
                                ("rollout.enforce_eager: false", args.vllm_compile),
                                ("model.mixed_precision: param_copy", args.param_copy)) if flag]
    on += list(args.verl_set or [])
    return ", ".join(on) or "defaults"


def _report(args, info, rows, quiet=False):
    e2e_report.add_ratios(rows)  # within each work mode
    e2e_report.add_floors(rows, info.get("gpu"))  # each stage's share of its floor on this card
    cols = e2e_report.table_columns(rows)
    notes = (f"GRPO, {args.arch} architecture (random weights, {common.param_count(args.arch) / 1e6:.0f}M parameters), "
             f"{args.prompts} prompts x {args.group} samples = {args.prompts * args.group} completions of "
             f"{'at most ' if args.lengths == 'realistic' else ''}{args.max_new_tokens} tokens per step, one optimizer step per step, no KL, {args.dtype} compute "
             f"over fp32 master weights (TRL: autocast; verl: model.mixed_precision, whose GPU default runs the "
             f"forward and backward of full fine-tuning on a {args.dtype} copy of them and autocast otherwise; "
             f"verl-hf-copy/-static generate with a {args.dtype} copy, "
             f"trl-bf16-static trains bf16 weights), {args.threads or 'default'} CPU threads; median of {args.steps} "
             f"steps after {args.warmup} warm-up, step_min_s-step_max_s their range, step_iqr_s the interquartile "
             f"range. Ratios compare rows of the same work mode only. x_trl_vllm = tokens/s over TRL with vLLM colocate (its defaults "
             f"otherwise); x_trl = over TRL's default configuration (HF generate); x_best_trl = over the fastest "
             f"TRL configuration run; x_real_verl = over real verl's row. verl options: {verl_options(args)}; attention per model.attn_implementation "
             f"auto (eager for bf16 on the CPU, else SDPA). peak_gib: the most torch's allocator held in the "
             f"trainer's process in a step, less a sleeping engine's released pool; rollout_gib / update_gib: verl's "
             f"per-stage peaks of it "
             f"(memory_gb/rollout, memory_gb/update_actor); device_*_gib: the device's memory in use by all "
             f"processes in those stages (memory_gb/device/*, NVML); logprob_diff / is_ratio_p999: verl's "
             f"engine-vs-actor mismatch (the mean |log pi_engine - log pi_actor| a token, the 99.9th percentile of "
             f"pi_actor / pi_engine), medians over the timed steps that checked it (engine_logprob_steps)"
             + (f"; LoRA rank {args.lora_rank} (alpha {2 * args.lora_rank}, all linear layers) on both sides"
                if args.lora_rank else "")
             + (f"; {real_verl_notes(args)}" if "real-verl" in args.systems else "") + ".")
    parts = [notes, lengths_notes(args), trl_sizing_notes(args), e2e_report.caption_notes(rows),
             e2e_report.floor_notes(rows, info.get("gpu")), e2e_report.stage_profile(rows)]
    notes = "\n\n".join(p for p in parts if p)
    common.write_results(args.out, "e2e_grpo", info, rows, cols, extra=dict(args=dict(vars(args))), notes=notes,
                         quiet=quiet)


def lengths_notes(args) -> str:
    """Realistic lengths in words: the bias, its calibration and prediction, the prompts ("" for fixed)."""
    if args.lengths != "realistic":
        return ""
    cal = getattr(args, "eos_calibration", None)
    how = (f"calibrated by benchmarks/eos_probe.py ({cal['probe']}) for a median of {cal['target_median']:g} tokens: "
           f"predicted median {cal['predicted']['median']}, mean {cal['predicted']['mean']}, "
           f"{100 * cal['predicted']['at_max_share']:.1f}% at the maximum (measured: each row's resp_len_median and "
           f"at_max_share)" if cal else "given by --eos-bias")
    return (f"Realistic lengths (benchmarks/e2e_work.py): completions end where the engine samples EOS (id "
            f"{args.eos_id}) under logit bias {args.eos_bias} on both sides, {how}; prompts of "
            f"{-(-args.prompt_words // 4)}-{args.prompt_words} words.")


def trl_sizing_notes(args) -> str:
    """TRL's micro-batch sized to the card, in words ("" when --trl-micro-batch gave it)."""
    sizing = getattr(args, "trl_micro_batch_sizing", None)
    if not sizing:
        return ""
    return (f"TRL's like-for-like micro-batch, sized to the card (benchmarks/trl_memory.py): {sizing['micro_batch']} "
            f"sequences (the longest prompt {sizing['longest_prompt']} tokens; {sizing['per_seq_bytes'] / 1e9:.2f} GB "
            f"a padded sequence against {sizing['left_bytes'] / 1e9:.1f} GB left beside vLLM's share and "
            f"{sizing['states_bytes'] / 1e9:.1f} GB of model states); --trl-micro-batch (E2E_TRL_MB_B / E2E_TRL_MB_C "
            f"in benchmarks/h200_run.sh) overrides it.")


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", "tiny", "threads", "out", arch="smollm2-135m",
                           max_new_tokens={"default": None, "help": "completion tokens (default: 16 --tiny, 256 GPU, "
                                                                    "64 CPU)"},
                           micro_batch={"default": None, "help": "verl: training.micro_batch_size (default: verl's)"},
                           dtype={"help": "compute dtype of both trainers, over fp32 master weights, "
                                          "or fp32"})
    ap.add_argument("--systems", nargs="+", default=None, choices=SYSTEMS)
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step")
    ap.add_argument("--group", type=int, default=None, help="samples per prompt (GRPO group)")
    ap.add_argument("--prompt-words", type=int, default=16)
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA rank on both sides (alpha 2 x rank); 0: full")
    ap.add_argument("--verl-set", nargs="+", default=None, metavar="KEY=VALUE",
                    help="verl: extra config keys (model.*, training.*, rollout.*), e.g. rollout.enable_sleep_mode=false")
    ap.add_argument("--packed", action="store_true", help="verl: training.use_packed_samples")
    ap.add_argument("--keep-logits", action="store_true", help="verl: training.logprob_keep_logits")
    ap.add_argument("--compile", action="store_true",
                    help="verl: model.torch_compile (the warm-up step pays the compile time)")
    ap.add_argument("--param-copy", action="store_true",
                    help="verl: model.mixed_precision param_copy (bf16 copy of the fp32 master weights)")
    ap.add_argument("--vllm-compile", action="store_true",
                    help="verl-vllm: rollout.enforce_eager false on the CPU too (engine start pays the compile)")
    ap.add_argument("--sglang-pythonpath", default=None,
                    help="verl-sglang: the package folder with SGLang (replaces PYTHONPATH for that system only)")
    ap.add_argument("--real-verl-pythonpath", default=None,
                    help="real-verl: the package folder with PyPI verl 0.9.x and its vLLM (the whole PYTHONPATH of "
                         "that system's verl process)")
    ap.add_argument("--real-verl-set", nargs="+", default=None, metavar="KEY=VALUE",
                    help="real-verl: extra Hydra overrides, appended last, e.g. actor_rollout_ref.rollout."
                         "free_cache_engine=True")
    ap.add_argument("--real-verl-token-budget", type=int, default=None,
                    help="real-verl: actor.ppo_max_token_len_per_gpu, the tokens of one dynamic micro-batch (default: "
                         "a whole step, which fits at work (a) only)")
    ap.add_argument("--work", nargs="+", default=["defaults"], choices=e2e_work.WORK_MODES,
                    help="the work each side computes (benchmarks/e2e_work.py): defaults (each system's own), "
                         "like-for-like (the same work on all sides); both: one row per system and mode")
    ap.add_argument("--trl-micro-batch", type=int, default=None,
                    help="TRL like-for-like: sequences per micro-batch (per_device_train_batch_size; gradient "
                         "accumulation over the rest; default: on a GPU sized to the card, benchmarks/"
                         "trl_memory.py; on the CPU one micro-batch of all completions)")
    ap.add_argument("--lengths", default="fixed", choices=e2e_work.LENGTHS,
                    help="fixed: every completion to --max-new-tokens; realistic: long-tailed (an EOS logit bias "
                         "calibrated for a median of a quarter of the maximum, the same on both sides) with "
                         "prompts of a quarter to all of --prompt-words words (benchmarks/e2e_work.py)")
    ap.add_argument("--eos-bias", type=float, default=None,
                    help="realistic lengths: this EOS logit bias instead of the calibrated one")
    ap.add_argument("--eos-id", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--trl-gen-probe", type=int, default=0, metavar="REPEATS",
                    help="trl-vllm: after its steps, replay its engine call REPEATS times in the same process "
                         "(benchmarks/trl_generation_probe.py)")
    # 5 timed steps: with 2-3, one slow step moved a median by 20-30%
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per system")
    ap.add_argument("--cache", default=None, help="where the random model folder is kept")
    ap.add_argument("--logs", default=None, help="folder for the stderr of failed systems")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model-path", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:  # a worker computes one row: one work mode
        if len(args.work) != 1:
            ap.error(f"--worker takes one --work, got {args.work}")
        args.work = args.work[0]
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
    if args.lengths == "realistic" and set([args.worker] if args.worker else args.systems) - set(
            e2e_work.REALISTIC_SYSTEMS):
        ap.error(f"--lengths realistic: the EOS bias goes through vLLM's sampling parameters; systems "
                 f"{' '.join(e2e_work.REALISTIC_SYSTEMS)} only")
    return args


if __name__ == "__main__":
    a = parse()
    if a.worker and a.threads:
        import torch

        torch.set_num_threads(a.threads)
    if a.worker:
        a.system = a.worker
        if a.worker == "real-verl":
            res = worker_real_verl(a, step_prompts(a))
        else:
            res = worker_trl(a, step_prompts(a)) if a.worker.startswith("trl") else worker_verl(a)
        print(RESULT_TAG + json.dumps(res), flush=True)
    else:
        run_all(a)
