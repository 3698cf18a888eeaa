"""Cross-key checks and derived values for `Config` (the one place they live).

Every error names the key at fault and what is allowed, so a user fixes it in one
read instead of meeting a NaN or a hang twenty minutes into a run.
"""

from __future__ import annotations

import difflib
import os
import re

from verl.algorithms.presets import GROUP_ESTIMATORS, PRESETS, apply_preset
from verl.config import Config, ConfigError, RewardFnConfig

ADV_ESTIMATORS = ("gae", "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax")
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
POLICY_LOSSES = ("ppo", "gspo", "reinforce")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
DTYPES = ("float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("auto", "sdpa", "eager", "flash_attention_2")
LOG_BACKENDS = ("console", "jsonl", "tensorboard", "wandb")


def did_you_mean(value, allowed) -> str:
    """'; did you mean 'x'?' for the closest allowed spelling of a mistyped value, else ''."""
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _choice(value, allowed, key):
    if value not in allowed:
        raise ConfigError(f"{key}: '{value}' is not one of {', '.join(map(str, allowed))}"
                          f"{did_you_mean(value, allowed)}")


# Upper bounds for values that cannot fit a machine, refused before anything is built (a batch
# of 1e20 prompts otherwise runs silently for minutes before running out of memory).
MAX_SEQUENCES_PER_STEP = 2 ** 20  # training.batch_size x rollout.n
MAX_TOKENS = 2 ** 20  # data.max_prompt_length, rollout.max_new_tokens (the model's context is checked at load)
MAX_SEED = 2 ** 32 - 1  # numpy's seed range; torch seeds are derived as seed * 1_000_003 + step


def _at_most(value, high, key, why):
    if value is not None and value > high:
        raise ConfigError(f"{key}: {value} is larger than {high:,} ({why})")


def _at_least(value, low, key):
    if value is None or value < low:
        raise ConfigError(f"{key}: must be >= {low}, got {value}")


def _positive(value, key):
    if value is None or not value > 0:
        raise ConfigError(f"{key}: must be > 0, got {value}")


def _in_unit(value, key, low_open=False):
    ok = (0 < value <= 1) if low_open else (0 <= value <= 1)
    if not ok:
        raise ConfigError(f"{key}: must be in {'(0, 1]' if low_open else '[0, 1]'}, got {value}")


def _check_reward(rf: RewardFnConfig, key: str) -> None:
    from verl.rewards.registry import REWARD_TYPES

    _choice(rf.type, REWARD_TYPES, f"{key}.type")
    _choice(rf.on_error, ("fail", "zero"), f"{key}.on_error")
    if rf.timeout_s is not None:
        if rf.type == "api":
            _positive(rf.timeout_s, f"{key}.timeout_s")  # each HTTP request's timeout
        else:
            _at_least(rf.timeout_s, 0, f"{key}.timeout_s")  # 0: no limit
    if rf.type == "python" and not rf.function:
        raise ConfigError(f"{key}.function: required for type python, as 'path/to/file.py:function_name'")
    if rf.type == "python" and ":" not in rf.function:
        raise ConfigError(f"{key}.function: '{rf.function}' must look like 'path/to/file.py:function_name'")
    if rf.type == "huggingface_rm" and not rf.model_name:
        raise ConfigError(f"{key}.model_name: required for type huggingface_rm")
    if rf.type == "api" and not rf.url:
        raise ConfigError(f"{key}.url: required for type api")
    if rf.type == "keyword" and not rf.keywords:
        raise ConfigError(f"{key}.keywords: required (a non-empty list) for type keyword")
    if rf.type == "combined":
        if not rf.components:
            raise ConfigError(f"{key}.components: required (a non-empty list) for type combined")
        for i, comp in enumerate(rf.components):
            _check_reward(comp, f"{key}.components[{i}]")


def check_hf_rollout_keys(r) -> None:
    """rollout.hf_weight_copy / cache_implementation / decode_loop: allowed values and the keys
    each needs, from the rollout section alone (HFRollout calls this too: it can be built without
    a finalized config)."""
    _choice(r.cache_implementation, ("dynamic", "static"), "rollout.cache_implementation")
    _choice(r.decode_loop, ("transformers", "verl"), "rollout.decode_loop")
    if r.name != "hf" and r.hf_weight_copy:
        raise ConfigError(f"rollout.hf_weight_copy: only for rollout.name: hf (got rollout.name: {r.name})")
    if r.name != "hf" and r.cache_implementation != "dynamic":
        raise ConfigError(f"rollout.cache_implementation: only for rollout.name: hf (got rollout.name: {r.name})")
    if r.decode_loop == "verl":
        if r.name != "hf":
            raise ConfigError(f"rollout.decode_loop: verl is the Hugging Face backend's loop (got rollout.name: {r.name})")
        if not r.hf_weight_copy:
            raise ConfigError("rollout.decode_loop: verl generates with the weight copy; set rollout.hf_weight_copy: true")
        if r.cache_implementation != "static":
            raise ConfigError("rollout.decode_loop: verl decodes into a static KV cache; set "
                              "rollout.cache_implementation: static")


def _check_hf_rollout(r, m) -> None:
    """The rollout keys above, and: a static cache needs weights in the compute dtype (it holds
    one dtype, see verl.rollout.hf_rollout)."""
    check_hf_rollout_keys(r)
    # Full fine-tuning keeps fp32 master weights (a LoRA base loads in model.dtype).
    fp32_weights = m.lora.rank == 0
    if r.cache_implementation == "static" and not r.hf_weight_copy and fp32_weights and m.dtype != "float32":
        raise ConfigError(f"rollout.cache_implementation: static under model.dtype: {m.dtype} autocast over the "
                          f"actor's float32 weights needs rollout.hf_weight_copy: true")


def _default_output_dir(cfg: Config) -> str:
    name = cfg.model.name.rstrip("/")
    if name.startswith("tiny:"):
        name = "tiny-" + name[len("tiny:"):]
    return os.path.join("outputs", f"{os.path.basename(name)}-{cfg.algorithm.name}")


def finalize_config(cfg: Config) -> Config:
    m, r, a, t, d = cfg.model, cfg.rollout, cfg.algorithm, cfg.training, cfg.data

    _choice(m.type, ("huggingface",), "model.type")
    _choice(m.dtype, DTYPES, "model.dtype")
    _choice(m.attn_implementation, ATTN_IMPLEMENTATIONS, "model.attn_implementation")
    if m.use_flash_attention and m.attn_implementation not in ("auto", "flash_attention_2"):
        raise ConfigError(f"model.use_flash_attention: true contradicts model.attn_implementation: "
                          f"{m.attn_implementation}; keep one of them")
    if cfg.critic.dtype is not None:
        _choice(cfg.critic.dtype, DTYPES, "critic.dtype")
    _choice(cfg.critic.type, ("huggingface",), "critic.type")
    if cfg.critic.share_actor:
        if cfg.critic.name:
            raise ConfigError(f"critic.share_actor: a value head on the actor's trunk has no backbone of its own; "
                              f"drop critic.name ('{cfg.critic.name}') or set critic.share_actor: false")
        if cfg.distributed.backend == "ray":
            raise ConfigError("critic.share_actor: not supported with distributed.backend: ray; "
                              "use a separate critic there (critic.share_actor: false)")
        _positive(cfg.critic.vf_coef, "critic.vf_coef")
    _at_least(m.lora.rank, 0, "model.lora.rank")
    _choice(m.mixed_precision, ("autocast", "param_copy"), "model.mixed_precision")
    if m.mixed_precision == "param_copy":
        if m.dtype not in ("bfloat16", "float16"):
            raise ConfigError(f"model.mixed_precision: param_copy computes in model.dtype, which is {m.dtype}; "
                              "set model.dtype: bfloat16 (or mixed_precision: autocast)")
        if m.lora.rank > 0:
            raise ConfigError("model.mixed_precision: param_copy is for full fine-tuning; with model.lora.rank > 0 "
                              "the frozen base already runs in model.dtype (set mixed_precision: autocast)")
    _choice(r.name, ("hf", "vllm"), "rollout.name")
    _choice(a.name, tuple(PRESETS), "algorithm.name")
    for key, seed in (("seed", cfg.seed), ("rollout.seed", r.seed)):
        if seed is not None and not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"{key}: {seed} is outside 0..{MAX_SEED} (the seed range numpy and torch share)")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.device):
        raise ConfigError(f"device: '{cfg.device}' is not one of auto, cpu, cuda, cuda:N")

    apply_preset(a)  # fills every algorithm key left as None
    _choice(a.adv_estimator, ADV_ESTIMATORS, "algorithm.adv_estimator")
    _choice(a.kl_estimator, KL_ESTIMATORS, "algorithm.kl_estimator")
    _choice(a.policy_loss, POLICY_LOSSES, "algorithm.policy_loss")
    _choice(a.loss_agg_mode, LOSS_AGG_MODES, "algorithm.loss_agg_mode")
    _choice(a.kl_ctrl.type, ("fixed", "adaptive"), "algorithm.kl_ctrl.type")
    _in_unit(a.gamma, "algorithm.gamma")
    _in_unit(a.lam, "algorithm.lam")
    _at_least(a.kl_coef, 0, "algorithm.kl_coef")
    _at_least(a.kl_loss_coef, 0, "algorithm.kl_loss_coef")
    _at_least(a.entropy_coeff, 0, "algorithm.entropy_coeff")
    _positive(a.clip_ratio_low, "algorithm.clip_ratio_low")
    if a.clip_ratio_high is None:
        a.clip_ratio_high = a.clip_ratio_low
    _positive(a.clip_ratio_high, "algorithm.clip_ratio_high")
    if a.clip_ratio_c and a.clip_ratio_c <= 1:
        raise ConfigError(f"algorithm.clip_ratio_c: dual-clip bound must be > 1 (or 0 = off), got {a.clip_ratio_c}")
    _at_least(a.critic_warmup, 0, "algorithm.critic_warmup")
    _positive(a.kl_ctrl.horizon, "algorithm.kl_ctrl.horizon")

    if r.n is None:
        r.n = 4 if a.adv_estimator in GROUP_ESTIMATORS else 1
    _at_least(r.n, 1, "rollout.n")
    if a.adv_estimator in GROUP_ESTIMATORS and r.n < 2:
        raise ConfigError(
            f"rollout.n: {a.adv_estimator} compares samples within a group, so it needs n >= 2, got {r.n}"
        )
    _at_least(r.max_new_tokens, 1, "rollout.max_new_tokens")
    _at_most(r.max_new_tokens, MAX_TOKENS, "rollout.max_new_tokens", "no model's context is that long")
    _at_most(r.n, MAX_SEQUENCES_PER_STEP, "rollout.n", "samples per prompt must fit in memory")
    _at_least(r.temperature, 0, "rollout.temperature")
    _in_unit(r.top_p, "rollout.top_p", low_open=True)
    _at_least(r.top_k, 0, "rollout.top_k")
    _in_unit(r.gpu_memory_utilization, "rollout.gpu_memory_utilization", low_open=True)
    _at_least(r.max_num_seqs, 1, "rollout.max_num_seqs")
    _at_least(r.tensor_model_parallel_size, 1, "rollout.tensor_model_parallel_size")
    if r.batch_size is not None:
        _at_least(r.batch_size, 1, "rollout.batch_size")
    _positive(r.kv_cache_gb, "rollout.kv_cache_gb")
    _at_least(r.tis_cap, 0, "rollout.tis_cap")
    _check_hf_rollout(r, m)
    if r.seed is None:
        r.seed = cfg.seed
    if r.max_model_len is None:
        r.max_model_len = d.max_prompt_length + r.max_new_tokens
    if r.max_model_len < d.max_prompt_length + r.max_new_tokens:
        raise ConfigError(
            f"rollout.max_model_len: {r.max_model_len} is shorter than data.max_prompt_length + "
            f"rollout.max_new_tokens = {d.max_prompt_length + r.max_new_tokens}"
        )

    _at_least(t.total_steps, 1, "training.total_steps")
    _at_least(t.batch_size, 1, "training.batch_size")
    _at_least(t.num_epochs, 1, "training.num_epochs")
    _at_least(t.micro_batch_size, 1, "training.micro_batch_size")
    _positive(t.lr, "training.lr")
    if t.critic_lr is None:
        t.critic_lr = 10 * t.lr
    _positive(t.critic_lr, "training.critic_lr")
    _at_least(t.grad_clip, 0, "training.grad_clip")
    _at_least(t.weight_decay, 0, "training.weight_decay")
    _at_least(t.warmup_steps, 0, "training.warmup_steps")
    _at_least(t.val_every, 0, "training.val_every")
    _at_least(t.max_minutes, 0, "training.max_minutes")
    _at_least(t.max_bad_steps, 1, "training.max_bad_steps")
    _at_least(t.logprob_chunk_size, 1, "training.logprob_chunk_size")
    _choice(t.lr_scheduler, ("constant", "linear", "cosine"), "training.lr_scheduler")
    if t.max_tokens_per_micro_batch is not None:
        _at_least(t.max_tokens_per_micro_batch, 1, "training.max_tokens_per_micro_batch")

    # Batch arithmetic: sequences per step = prompts x samples; it must split evenly into
    # optimizer mini-batches, and those into micro-batches (no silent zero accumulation).
    seqs = t.batch_size * r.n
    _at_most(seqs, MAX_SEQUENCES_PER_STEP, "training.batch_size",
             f"prompts per step x rollout.n {r.n} sequences must fit in memory")
    if t.mini_batch_size is None:
        t.mini_batch_size = seqs
    _at_least(t.mini_batch_size, 1, "training.mini_batch_size")
    if seqs % t.mini_batch_size:
        raise ConfigError(
            f"training.mini_batch_size: {t.mini_batch_size} does not divide the {seqs} sequences per step "
            f"(training.batch_size {t.batch_size} x rollout.n {r.n})"
        )
    if t.micro_batch_size > t.mini_batch_size or t.mini_batch_size % t.micro_batch_size:
        raise ConfigError(
            f"training.micro_batch_size: {t.micro_batch_size} must divide training.mini_batch_size "
            f"{t.mini_batch_size}"
        )

    _choice(d.truncation, ("filter", "left", "right", "error"), "data.truncation")
    _at_least(d.max_prompt_length, 1, "data.max_prompt_length")
    _at_most(d.max_prompt_length, MAX_TOKENS, "data.max_prompt_length", "no model's context is that long")
    _at_least(d.val_n, 1, "data.val_n")

    _check_reward(cfg.reward_fn, "reward_fn")

    for b in cfg.logging.backends:
        _choice(b, LOG_BACKENDS, "logging.backends")
    _choice(cfg.logging.wandb_mode, ("auto", "online", "offline", "disabled"), "logging.wandb_mode")
    _at_least(cfg.logging.log_every, 1, "logging.log_every")
    _at_least(cfg.logging.val_samples, 0, "logging.val_samples")

    ck = cfg.checkpoint
    _at_least(ck.save_actor_every, 0, "checkpoint.save_actor_every")
    _at_least(ck.save_full_every, 0, "checkpoint.save_full_every")
    _at_least(ck.keep_last, 1, "checkpoint.keep_last")
    _choice(ck.save_mode, ("actor", "full", "lora"), "checkpoint.save_mode")
    _positive(ck.stop_grace_s, "checkpoint.stop_grace_s")
    if ck.save_mode == "lora" and m.lora.rank == 0:
        raise ConfigError("checkpoint.save_mode: 'lora' needs model.lora.rank > 0")
    if ck.save_dir is None:
        ck.save_dir = _default_output_dir(cfg)

    _choice(cfg.distributed.backend, ("none", "ray"), "distributed.backend")
    _at_least(cfg.distributed.nnodes, 1, "distributed.nnodes")
    _at_least(cfg.distributed.devices_per_node, 1, "distributed.devices_per_node")
    _positive(cfg.distributed.timeout_s, "distributed.timeout_s")
    _choice(cfg.distributed.rollout, ("auto", "driver", "workers"), "distributed.rollout")
    _positive(cfg.distributed.weight_bucket_mb, "distributed.weight_bucket_mb")
    return cfg
