"""benchmarks/e2e_grpo.py's TRL systems (trl-vllm, trl, trl-eager, trl-static, trl-bf16-static): GRPOTrainer on
the same work, in its own process. `trl_config_kwargs` builds the GRPOConfig keywords without importing TRL
(tested on a CPU: tests/benchmarks/test_bench_e2e_work.py); `worker_trl` runs the trainer and times its steps."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import common
import e2e_work

HERE = os.path.dirname(os.path.abspath(__file__))


def trl_config_kwargs(args, device_type: str, output_dir: str) -> dict:
    """Every GRPOConfig keyword of this run: the shared work (e2e_grpo.py's docstring), the system's
    generation path, and the work mode's keys (e2e_work.trl_kwargs)."""
    n = args.prompts * args.group
    total = args.warmup + args.steps
    work = getattr(args, "work", "defaults")
    dtype = e2e_work.trl_weight_dtype(work, args.system, bool(args.lora_rank))
    model_init_kwargs = {"dtype": dtype, "attn_implementation": "eager" if args.system == "trl-eager" else "sdpa"}
    if args.system == "trl-vllm":
        # TRL's fast path: an in-process vLLM engine (colocate), synced from the model every step.
        # Completions end as verl's (e2e_work.stop_kwargs: ignore_eos, or realistic lengths' EOS logit bias).
        extra = dict(use_vllm=True, vllm_mode="colocate", generation_kwargs=e2e_work.trl_vllm_generation_kwargs(
            work, getattr(args, "eos_bias", None), getattr(args, "eos_id", None)))
    else:
        extra = dict(generation_kwargs={"min_new_tokens": args.max_new_tokens},
                     cache_implementation="static" if args.system in ("trl-static", "trl-bf16-static") else None)
    work_kwargs = e2e_work.trl_kwargs(work, n, getattr(args, "trl_micro_batch", None), bool(args.lora_rank))
    if args.system != "trl-vllm":  # the IS correction exists only for vLLM's log-probs
        work_kwargs.pop("vllm_importance_sampling_correction")
    return dict(
        output_dir=output_dir, num_generations=args.group, max_completion_length=args.max_new_tokens,
        learning_rate=1e-6, max_steps=total, logging_steps=1, report_to="none", save_strategy="no", seed=0, beta=0.0,
        temperature=1.0, top_p=1.0, top_k=0, shuffle_dataset=False, disable_tqdm=True,
        bf16=dtype == "bfloat16" or args.dtype == "bfloat16", use_cpu=device_type == "cpu", dataloader_num_workers=0,
        model_init_kwargs=model_init_kwargs, **work_kwargs, **extra)


def recording_lengths(generate, into: list):
    """TRL's vllm_generation.generate (-> prompt_ids, completion_ids, logprobs, logprob_token_ids: lists of token
    id lists, one per completion) wrapped to leave [prompt tokens, completion tokens] of each completion of
    its last call in `into`, as verl's rows record them from their Batch."""
    def recorded(*a, **kw):
        out = generate(*a, **kw)
        into[:] = [[len(p), len(c)] for p, c in zip(out[0], out[1], strict=True)]
        return out

    return recorded


def worker_trl(args, prompts: list[str]) -> dict:
    import torch  # noqa: F401  (before TRL, as transformers expects)
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, HERE)
    from e2e_reward import trl_reward

    device = common.resolve_device(args.device)
    tok = AutoTokenizer.from_pretrained(args.model_path)
    tok.padding_side = "left"
    steps: list[dict] = []
    gen_s, sync_s, gen_calls = [0.0], [0.0], []
    gen_lengths: list[list[int]] = []  # the last generation's [prompt tokens, completion tokens] per sequence

    def time_call(fn, acc, calls=None):  # seconds spent inside fn (device synchronised), summed into acc[0]
        def timed_fn(*a, **kw):
            times, out = common.timed(lambda: fn(*a, **kw), device)
            acc[0] += times[0]
            calls.append(times[0]) if calls is not None else None
            return out

        return timed_fn

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            common.sync(device)
            gen_s[0] = sync_s[0] = 0.0
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            common.sync(device)
            wall = time.perf_counter() - self.t0
            steps.append(dict(step=len(steps), wall_s=wall,
                              stages={"rollout": gen_s[0], "update_weights": sync_s[0],
                                      "rest": wall - gen_s[0] - sync_s[0]},
                              peak_gib=common.peak_gib(device)))
            if gen_lengths:  # one generation per optimizer step (generation_batch_size = the step's completions)
                steps[-1]["lengths"] = list(gen_lengths)
                gen_lengths.clear()

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and steps and "completions/mean_length" in logs:
                steps[-1]["completion_len"] = logs["completions/mean_length"]

    peft_config = None
    if args.lora_rank:
        from peft import LoraConfig

        peft_config = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, target_modules="all-linear")
    conf = GRPOConfig(**trl_config_kwargs(args, device.type, tempfile.mkdtemp(prefix="trl-bench-")))
    trainer = GRPOTrainer(model=args.model_path, reward_funcs=trl_reward, args=conf,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tok,
                          callbacks=[Timer()], peft_config=peft_config)
    recorder = None
    if args.system == "trl-vllm":
        gen = trainer.vllm_generation
        gen.generate = time_call(recording_lengths(gen.generate, gen_lengths), gen_s, gen_calls)
        gen.sync_weights = time_call(gen.sync_weights, sync_s)
        if getattr(args, "trl_gen_probe", 0):
            import trl_generation_probe as probe

            recorder = probe.EngineCallRecorder(gen.llm, sync=lambda: common.sync(device))
    else:
        trainer.model.generate = time_call(trainer.model.generate, gen_s)
    trainer.train()
    n = args.prompts * args.group
    prompt_tokens = statistics.mean(len(tok(p)["input_ids"]) for p in prompts[:n])
    for s in steps:  # the generation's own lengths where recorded (trl-vllm), else the logged mean
        s["tokens"] = (sum(p + c for p, c in s["lengths"]) if s.get("lengths")
                       else n * (prompt_tokens + s.get("completion_len", args.max_new_tokens)))
    out = dict(steps=steps)
    if recorder is not None:  # the generation probe: the same engine call replayed in this process, and its variants
        replays = probe.replay(recorder, args.group, args.trl_gen_probe, sync=lambda: common.sync(device))
        out["gen_probe"] = probe.summary(gen_calls, recorder, replays, probe.engine_settings(gen.llm), args.warmup)
        recorder.restore()
    return out
