"""The rules between config sections, checked once every value is filled (verl/config/auto.py): pure
functions of the config (and, for the two that depend on the machine, of the probed Platform); they
raise ConfigError and change nothing.

    check(config)                       # the rules between sections
    check_platform(config, platform)    # what the machine must offer (SGLang's GPU, a CUDA stream priority, FP8)
"""

from __future__ import annotations

from verl.config.keys import at_most
from verl.config.rollout import MAX_SEQUENCES_PER_STEP
from verl.errors import ConfigError
from verl.install_hint import pip_extra


def check(cfg) -> None:
    """Rules between sections, on the filled values (rollout.n, mini_batch_size, max_model_len, ...)."""
    from verl.algorithms.advantages import ESTIMATORS

    m, r, a, t, d, ck = cfg.model, cfg.rollout, cfg.algorithm, cfg.training, cfg.data, cfg.checkpoint
    m.validate("model")  # the rules that depend on the dtype (mixed_precision: param_copy), now it is resolved
    if cfg.critic.share_actor and cfg.distributed.backend == "ray":
        raise ConfigError("critic.share_actor: not supported with distributed.backend: ray; "
                          "use a separate critic there (critic.share_actor: false)")
    # A static cache holds one dtype (verl.rollout.hf_rollout); full fine-tuning keeps float32
    # master weights (a LoRA base loads in model.dtype).
    if r.cache_implementation == "static" and not r.hf_weight_copy and m.lora.rank == 0 and m.dtype != "float32":
        raise ConfigError(f"rollout.cache_implementation: static under model.dtype: {m.dtype} autocast over the "
                          f"actor's float32 weights needs rollout.hf_weight_copy: true")
    if ESTIMATORS[a.adv_estimator].compares_group and r.n < 2 and a.group_of_one == "zero":
        raise ConfigError(f"rollout.n: {a.adv_estimator} compares samples within a group, so it needs n >= 2, "
                          f"got {r.n} (or algorithm.group_of_one: score, real verl's rule: a lone sample's reward "
                          "is its advantage)")
    budget_key = "rollout.multi_turn.max_total_tokens" if r.is_multi_turn else "rollout.max_new_tokens"
    if r.max_model_len < d.max_prompt_length + r.response_budget:
        raise ConfigError(f"rollout.max_model_len: {r.max_model_len} is shorter than data.max_prompt_length + "
                          f"{budget_key} = {d.max_prompt_length + r.response_budget}")

    # Batch arithmetic: sequences per step = prompts x samples; it must split evenly into
    # optimizer mini-batches, and those into micro-batches (no silent zero accumulation).
    seqs = t.batch_size * r.n
    at_most(seqs, MAX_SEQUENCES_PER_STEP, "training.batch_size",
            f"prompts per step x rollout.n {r.n} sequences must fit in memory")
    if seqs % t.mini_batch_size:
        raise ConfigError(f"training.mini_batch_size: {t.mini_batch_size} does not divide the {seqs} sequences per "
                          f"step (training.batch_size {t.batch_size} x rollout.n {r.n})")
    if t.micro_batch_size > t.mini_batch_size or t.mini_batch_size % t.micro_batch_size:
        raise ConfigError(f"training.micro_batch_size: {t.micro_batch_size} must divide training.mini_batch_size "
                          f"{t.mini_batch_size}")

    if r.tis_cap > 0 and a.rollout_correction.enabled:
        raise ConfigError("rollout.tis_cap: the shorthand of algorithm.rollout_correction, which is set too; give "
                          "the correction in one place (rollout.tis_cap: 0, or no algorithm.rollout_correction keys)")
    if cfg.distributed.backend == "ray":
        _check_ray(cfg)
    if r.restart_on_failure and (cfg.distributed.backend != "ray" or cfg.distributed.rollout == "driver"):
        raise ConfigError("rollout.restart_on_failure: restarts engines that run in their own processes "
                          "(distributed.backend: ray with distributed.rollout: workers or auto); this run's engine "
                          "is in the trainer's process, whose crash ends the run (--resume auto continues it)")
    if cfg.async_training.enable and cfg.data.sampler_class:
        raise ConfigError("data.sampler_class: a sampler orders the prompts of each step after the previous step's "
                          "update (a curriculum's update(batch)); async_training draws batches ahead of it: use one "
                          "of the two")
    if cfg.async_training.enable:
        _check_async(cfg)
    elif cfg.async_training.streaming:
        raise ConfigError("async_training.streaming: is a mode of asynchronous training; set "
                          "async_training.enable: true (or streaming: false)")
    elif cfg.async_training.engine_priority != "normal":
        raise ConfigError("async_training.engine_priority: sets the stream of the asynchronous producer; set "
                          "async_training.enable: true (or engine_priority: normal)")
    if ck.save_mode == "lora" and m.lora.rank == 0:
        raise ConfigError("checkpoint.save_mode: 'lora' needs model.lora.rank > 0")


def check_platform(cfg, platform) -> None:
    """What the machine must offer the config: SGLang runs on CUDA only and is an extra of its own (said
    when the config loads, not at the first step; no fallback to another engine); a high CUDA stream
    priority needs a CUDA device."""
    a = cfg.async_training
    where = f"{cfg.device}{' (no CUDA GPU here)' if cfg.device == 'auto' else ''}"
    if cfg.rollout.name == "sglang":
        if not platform.gpu:
            raise ConfigError(f"rollout.name: sglang needs a CUDA GPU (SGLang has no CPU build) and device is "
                              f"{where}; use rollout.name: vllm or rollout.name: hf")
        if cfg.model.dtype == "float32":
            raise ConfigError("model.dtype: float32 cannot be generated with rollout.name: sglang (its CUDA kernels, "
                              "e.g. RMSNorm, have no float32 path); use model.dtype: bfloat16 (the actor keeps float32 "
                              "master weights under autocast) or rollout.name: vllm")
        if not platform.sglang:
            raise ConfigError(f"rollout.name: sglang needs SGLang, which is not installed: {pip_extra('sglang')} "
                              "(it cannot share an environment with the vllm extra)")
    if cfg.rollout.quantization == "fp8":
        _check_fp8(cfg, platform, where)
    if a.enable and a.engine_priority == "high" and not platform.gpu:
        raise ConfigError(f"async_training.engine_priority: high is a CUDA stream priority and device is "
                          f"{where}; set it to normal")


def _check_fp8(cfg, platform, where: str) -> None:
    """rollout.quantization: fp8 (verl/rollout/fp8_vllm.py) is vLLM's block-FP8 engine on a CUDA GPU, fed by
    the trainer's own in-process engine. The CPU is refused: vLLM's CPU build runs block FP8 only in bfloat16
    through AMX kernels (and on the machine this was written on, its bf16 attention kernel stopped the process
    with an illegal instruction); SGLang's FP8 path and the Ray replicas' sync are not built yet."""
    r, m = cfg.rollout, cfg.model
    if r.name != "vllm":
        raise ConfigError(f"rollout.quantization: fp8 runs on the vLLM engine for now (rollout.name is {r.name}); set "
                          "rollout.name: vllm or leave rollout.quantization unset")
    if not platform.gpu:
        raise ConfigError(f"rollout.quantization: fp8 needs a CUDA GPU (vLLM's FP8 kernels) and device is {where}; "
                          "leave rollout.quantization unset on the CPU")
    if m.dtype not in ("bfloat16", "float16"):
        raise ConfigError(f"rollout.quantization: fp8 runs the engine in model.dtype, which is {m.dtype}; vLLM's FP8 "
                          "layers compute in bfloat16 or float16: set model.dtype: bfloat16 (the actor keeps float32 "
                          "master weights under autocast)")
    if cfg.distributed.backend == "ray":
        raise ConfigError("rollout.quantization: fp8 is not supported with distributed.backend: ray yet (the "
                          "replicas' weight sync does not quantize); use distributed.backend: none")


def _check_ray(cfg) -> None:
    """What `distributed.backend: ray` cannot do, refused when the config loads (before Ray starts)."""
    m, t, d = cfg.model, cfg.training, cfg.distributed
    unsupported = [("model.lora.rank > 0", m.lora.rank > 0), ("model.torch_compile", m.torch_compile),
                   ("training.use_packed_samples", t.use_packed_samples),
                   ("training.offload_optimizer", t.offload_optimizer),
                   ("training.offload_idle_models", t.offload_idle_models),
                   ("distillation.enable", cfg.distillation.enable)]
    for key_name, on in unsupported:
        if on:
            raise ConfigError(f"{key_name}: not supported with distributed.backend: ray yet (FSDP shards the "
                              "weights and optimizer instead); turn it off or use distributed.backend: none")
    if d.rollout == "workers" and cfg.rollout.name != "vllm":
        raise ConfigError("distributed.rollout: 'workers' runs one vLLM engine per replica; set rollout.name: vllm "
                          "(or distributed.rollout: driver)")
    ranks = d.nnodes * d.devices_per_node
    if t.mini_batch_size < ranks:
        raise ConfigError(f"training.mini_batch_size: {t.mini_batch_size} sequences cannot feed {ranks} "
                          "data-parallel ranks (each rank needs at least one per mini-batch)")


def _check_async(cfg) -> None:
    """Overlapping generation with the update needs an engine that does not generate with the very
    module being trained (under Ray too: the driver's engine, or the vLLM replica group)."""
    r = cfg.rollout
    if cfg.async_training.partial_rollout and r.is_multi_turn:
        raise ConfigError("async_training.partial_rollout: not with multi-turn rollouts (rollout.tools / "
                          "rollout.environment) yet: their turns are generated whole; set it to false")
    if cfg.async_training.partial_rollout and r.routing_replay == "engine":
        raise ConfigError("async_training.partial_rollout: the engine's routing (rollout.routing_replay: engine) is "
                          "recorded per engine call, and a partial rollout's response spans several; use "
                          "routing_replay: pi_old, or partial_rollout: false")
    if cfg.async_training.streaming:
        _check_streaming(cfg)
    if cfg.async_training.engine_priority == "high" and cfg.distributed.backend == "ray":
        raise ConfigError("async_training.engine_priority: high is for the driver's own engine thread, not under "
                          "distributed.backend: ray; set it to normal")
    if cfg.async_training.max_staleness > 0 and r.name == "hf" and not r.hf_weight_copy:
        raise ConfigError("async_training.max_staleness: > 0 generates while the actor trains, so the engine needs "
                          "weights of its own: set rollout.hf_weight_copy: true (or rollout.name: vllm), or "
                          "max_staleness: 0")


def _check_streaming(cfg) -> None:
    """Streaming drives the in-process vLLM engine step by step (verl/rollout/vllm_stream.py) and draws
    the next batches' prompts ahead of time: what it cannot serve is named here."""
    r, a = cfg.rollout, cfg.async_training
    if r.name != "vllm":
        raise ConfigError(f"async_training.streaming: drives the in-process vLLM engine; rollout.name is "
                          f"{r.name!r} (set rollout.name: vllm, or streaming: false)")
    if a.partial_rollout:
        raise ConfigError("async_training.streaming: already continues generations in flight with newer weights; "
                          "set async_training.partial_rollout: false")
    if r.is_multi_turn:
        raise ConfigError("async_training.streaming: not with multi-turn rollouts (rollout.tools / "
                          "rollout.environment) yet; set it to false")
    if cfg.algorithm.dynamic_sampling.enable:
        raise ConfigError("async_training.streaming: draws the next batches' prompts ahead, so DAPO's extra draws "
                          "(algorithm.dynamic_sampling) would break the resume order; set one of them to false")
    if cfg.distributed.rollout == "workers":
        raise ConfigError("async_training.streaming: drives the driver's engine; set distributed.rollout: driver")
