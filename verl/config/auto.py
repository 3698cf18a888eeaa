"""The values a finished config derives: keys left on `auto` (what the platform offers decides them) and
keys derived from others (rollout.n, the mini-batch size, save_dir, ...). Filled in place, into declared
fields only; the lines saying what auto chose go into the declared note fields (model.dtype_note,
rollout.auto_note, training.auto_note; logged once the run starts) and are returned.

    notes = resolve_auto(config, probe_platform(config))    # verl/config/root.py probes the platform

The checks that read the filled values are verl/config/checks.py's; this module raises nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """What the machine offers the config's device (probed once, by root.probe_platform)."""

    gpu: bool  # the config's device is a CUDA device (device: auto with one here, or cuda / cuda:N)
    bf16: bool  # that GPU computes in bfloat16 (Ampere or newer)
    vllm: bool  # vLLM is installed (asked on a GPU only: the CPU never picks it)
    sglang: bool  # SGLang is installed


def resolve_auto(cfg, platform: Platform) -> list[str]:
    """Fill cfg's auto and derived values for `platform`; the notes of what auto chose (a GPU's only: on
    the CPU the defaults are silent), in the order the run logs them."""
    from verl.algorithms.advantages import ESTIMATORS

    m, r, t, d, ck = cfg.model, cfg.rollout, cfg.training, cfg.data, cfg.checkpoint
    if m.dtype == "auto":
        m.dtype, m.dtype_note = _default_dtype(platform)
    t.auto_note = _resolve_update_speedups(cfg, platform)
    if r.name == "auto":
        r.name, r.auto_note = _default_engine(cfg, platform)
    if t.use_packed_samples is None:  # auto (verl.config.training): packed on a GPU, padded elsewhere
        t.use_packed_samples = t.packed_by_default = platform.gpu and cfg.distributed.backend != "ray"
    # Samples per prompt: group estimators compare a prompt's samples.
    if r.n is None:
        r.n = 4 if ESTIMATORS[cfg.algorithm.adv_estimator].compares_group else 1
    if r.seed is None:
        r.seed = cfg.seed
    _resolve_quantization_defaults(cfg)
    if r.max_model_len is None:
        r.max_model_len = d.max_prompt_length + r.response_budget
    if t.critic_lr is None:
        t.critic_lr = 10 * t.lr
    if t.mini_batch_size is None:  # one optimizer step per batch: prompts x samples sequences
        t.mini_batch_size = t.batch_size * r.n
    if t.micro_batch_size is None:
        t.micro_batch_size, t.micro_note = _default_micro_batch(t.mini_batch_size)
    if ck.save_dir is None:
        ck.save_dir = _default_output_dir(cfg)
    return cfg.auto_notes()


def _resolve_quantization_defaults(cfg) -> None:
    """rollout.quantization: fp8 computes rollouts with other weights than the actor's: the mismatch is
    corrected (rollout.tis_cap 2.0, real verl's rollout_is_threshold default), measured on every step
    (rollout.logprob_check_every 1) and expected to be larger (training.logprob_diff_warn 0.25). Keys the
    user set keep their values; a correction set in algorithm.rollout_correction replaces the 2.0."""
    from verl.config.rollout import DEFAULT_CHECK_EVERY, FP8_CHECK_EVERY, FP8_TIS_CAP
    from verl.config.training import DEFAULT_DIFF_WARN, FP8_DIFF_WARN

    r, t = cfg.rollout, cfg.training
    fp8 = r.quantization == "fp8"
    if r.tis_cap is None:  # a correction given as algorithm.rollout_correction is the user's: no shorthand then
        r.tis_cap = FP8_TIS_CAP if fp8 and not cfg.algorithm.rollout_correction.enabled else 0.0
    if r.logprob_check_every is None:
        r.logprob_check_every = FP8_CHECK_EVERY if fp8 else DEFAULT_CHECK_EVERY
    if t.logprob_diff_warn is None:
        t.logprob_diff_warn = FP8_DIFF_WARN if fp8 else DEFAULT_DIFF_WARN


DEFAULT_MICRO_BATCH = 4  # sequences per forward/backward when training.micro_batch_size is left on auto


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest d <= cap dividing n: a micro-batch that splits n sequences evenly."""
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def _default_micro_batch(mini_batch_size: int) -> tuple[int, str]:
    """training.micro_batch_size: auto -> (size, the line the run logs when it is not the usual 4). A
    mini-batch of 2 or 6 sequences gets micro-batches of 2 or 3; micro-batching changes memory and speed,
    not results (the gradients of a mini-batch are summed over its micro-batches)."""
    micro = largest_divisor_at_most(mini_batch_size, DEFAULT_MICRO_BATCH)
    if micro == DEFAULT_MICRO_BATCH:
        return micro, ""
    return micro, (f"training.micro_batch_size: auto -> {micro} (the usual {DEFAULT_MICRO_BATCH} does not divide "
                   f"training.mini_batch_size {mini_batch_size}; set it to choose another)")


def _default_output_dir(cfg) -> str:
    name = cfg.model.name.rstrip("/")
    if name.startswith("tiny:"):
        name = "tiny-" + name[len("tiny:"):]
    return os.path.join("outputs", f"{os.path.basename(name)}-{cfg.algorithm.name}")


def _default_engine(cfg, platform: Platform) -> tuple[str, str]:
    """rollout.name: auto -> (engine, the line the trainer logs): vLLM on a CUDA device when it is
    installed and no Hugging Face-only rollout key is set, else the Hugging Face backend."""
    if not platform.gpu:
        return "hf", ""
    if cfg.rollout.uses_hf_only_keys:
        return "hf", "rollout.name: auto -> hf (Hugging Face-only rollout keys are set)"
    if not platform.vllm:
        from verl.install_hint import pip_extra

        return "hf", f"rollout.name: auto -> hf on the GPU: vLLM is not installed ({pip_extra('vllm')})"
    return "vllm", "rollout.name: auto -> vllm (a CUDA device and vLLM are here; rollout.name: hf to choose HF)"


def _default_dtype(platform: Platform) -> tuple[str, str]:
    """model.dtype: auto -> (dtype, the line the trainer logs): bfloat16 autocast over float32 master
    weights on a CUDA device with bf16 support (real verl's and TRL's default compute), float32 on the
    CPU (bf16 matmuls are slower there, and its rounding hurts the tiny models CPU runs use)."""
    if not platform.gpu:
        return "float32", ""
    if platform.bf16:
        return "bfloat16", ("model.dtype: auto -> bfloat16 on the GPU (autocast over float32 master weights; "
                            "model.dtype: float32 to compute in float32)")
    return "float32", "model.dtype: auto -> float32 (no bfloat16 support on this GPU)"


def _resolve_update_speedups(cfg, platform: Platform) -> str:
    """The update's speed switches left on auto -- model.torch_compile, model.mixed_precision and
    training.logprob_keep_logits -- on for the single-process actor on a CUDA device, off on the CPU
    (tiny models, where compiling costs more than it saves) and under Ray (the sharded workers
    compute in model.dtype already and refuse torch_compile). With LoRA, torch_compile needs
    model.lora.fused: on an H100 the compiled fused layers took the 7B LoRA update from 5.91 to 4.36 s
    (MFU 34.0 -> 46.0%, peak 45.2 -> 31.9 GiB) with the eager update's loss to 1e-3, while compiled
    peft layers (fused off) ended the same three updates with a policy loss 17% off the others'
    (benchmarks/results/h100/lora_compile_2026-12-08), not understood yet: so not with a LoRA dropout or
    adapted tensors named in model.lora.target_parameters either, whose layers run peft's forward (an MoE
    model's experts under target_parameters auto do too: the actor logs it); mixed_precision: param_copy
    needs full fine-tuning in bfloat16/float16 and no training.offload_optimizer (its copy, 2 bytes a
    parameter, would stay through the optimizer step that offloading makes room for). On the H200,
    Qwen2.5-1.5B architecture, 32 prompts x 8 x 512 tokens, they took the update from 4.73 to 2.72 s
    a step (benchmarks/results/h200, e2e_b_tuned_all, docs/performance.md). Returns the line the trainer
    logs of what auto chose ('' on the CPU, or when nothing was on auto)."""
    m, t = cfg.model, cfg.training
    single_gpu = platform.gpu and cfg.distributed.backend != "ray"
    chosen = []
    if m.torch_compile is None:  # LoRA: only verl's fused adapter layers are compiled (docstring)
        fused_lora = m.lora.fused and m.lora.dropout == 0 and not isinstance(m.lora.target_parameters, (list, tuple))
        m.torch_compile = single_gpu and (m.lora.rank == 0 or fused_lora)
        chosen.append(f"model.torch_compile: {str(m.torch_compile).lower()}")
    if m.mixed_precision == "auto":
        copy = (single_gpu and m.lora.rank == 0 and m.dtype in ("bfloat16", "float16")
                and not t.offload_optimizer)
        m.mixed_precision = "param_copy" if copy else "autocast"
        chosen.append(f"model.mixed_precision: {m.mixed_precision}")
    if t.logprob_keep_logits is None:
        t.logprob_keep_logits = single_gpu
        chosen.append(f"training.logprob_keep_logits: {str(t.logprob_keep_logits).lower()}")
    if single_gpu and chosen:
        return (f"auto on the GPU -> {', '.join(chosen)} (the update's speed switches; set them "
                "to false / autocast for the plain path)")
    return ""
