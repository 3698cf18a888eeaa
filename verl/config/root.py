"""The whole config: its sections, the two top-level keys, and the rules that involve more than
one section (the only place those live), applied by `finalize()` after the preset."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from verl.config.algorithm import AlgorithmConfig, apply_preset
from verl.config.async_training import AsyncTrainingConfig
from verl.config.checkpoint import CheckpointConfig
from verl.config.critic import CriticConfig
from verl.config.data import DataConfig
from verl.config.distributed import DistributedConfig
from verl.config.keys import Section, at_most, key, resume_safe_keys
from verl.config.logging_section import LoggingConfig
from verl.config.model import ModelConfig
from verl.config.reward_fn import RewardFnConfig
from verl.config.rollout import MAX_SEQUENCES_PER_STEP, RolloutConfig, check_seed
from verl.config.training import TrainingConfig
from verl.errors import ConfigError


@dataclass
class Config(Section):
    model: ModelConfig = key(factory=ModelConfig)
    rollout: RolloutConfig = key(factory=RolloutConfig)
    algorithm: AlgorithmConfig = key(factory=AlgorithmConfig)
    training: TrainingConfig = key(factory=TrainingConfig)
    reward_fn: RewardFnConfig = key(factory=RewardFnConfig)
    critic: CriticConfig = key(factory=CriticConfig)
    data: DataConfig = key(factory=DataConfig)
    logging: LoggingConfig = key(factory=LoggingConfig)
    checkpoint: CheckpointConfig = key(factory=CheckpointConfig)
    distributed: DistributedConfig = key(factory=DistributedConfig)
    async_training: AsyncTrainingConfig = key(factory=AsyncTrainingConfig)
    seed: int = 42
    device: str = key("auto", resume_safe=True)  # auto | cpu | cuda | cuda:N

    def validate(self, path: str) -> None:
        check_seed(self.seed, "seed")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ConfigError(f"device: '{self.device}' is not one of auto, cpu, cuda, cuda:N")

    def finalize(self) -> "Config":
        """The preset, every section's checks (again: Python code may have changed a section
        after it was built), then the cross-section rules and derived values below."""
        apply_preset(self.algorithm)
        for f in dataclasses.fields(self):
            section = getattr(self, f.name)
            if isinstance(section, Section):
                section.check(f.name)
        self.validate("")
        check_cross_sections(self)
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def resume_safe_keys(cls) -> tuple[str, ...]:
        """Keys that may change between a checkpoint and its resume (declared `resume_safe` on each
        key, or RESUME_SAFE on a section): they do not change the training math."""
        return tuple(resume_safe_keys(cls))

    @property
    def output_dir(self) -> str:
        return self.checkpoint.save_dir  # resolved by finalize()


def _default_output_dir(cfg: Config) -> str:
    name = cfg.model.name.rstrip("/")
    if name.startswith("tiny:"):
        name = "tiny-" + name[len("tiny:"):]
    return os.path.join("outputs", f"{os.path.basename(name)}-{cfg.algorithm.name}")


def _on_gpu(cfg: Config) -> bool:
    if cfg.device == "auto":
        import torch

        return torch.cuda.is_available()
    return cfg.device.startswith("cuda")


def _default_engine(cfg: Config) -> tuple[str, str]:
    """rollout.name: auto -> (engine, the line the trainer logs): vLLM on a CUDA device when it is
    installed and no Hugging Face-only rollout key is set, else the Hugging Face backend."""
    import importlib.util

    on_gpu = _on_gpu(cfg)
    if not on_gpu:
        return "hf", ""
    if cfg.rollout.uses_hf_only_keys:
        return "hf", "rollout.name: auto -> hf (Hugging Face-only rollout keys are set)"
    if importlib.util.find_spec("vllm") is None:
        return "hf", "rollout.name: auto -> hf on the GPU: vLLM is not installed (pip install 'verl[vllm]')"
    return "vllm", "rollout.name: auto -> vllm (a CUDA device and vLLM are here; rollout.name: hf to choose HF)"


def _default_dtype(cfg: Config) -> tuple[str, str]:
    """model.dtype: auto -> (dtype, the line the trainer logs): bfloat16 autocast over float32 master
    weights on a CUDA device with bf16 support (real verl's and TRL's default compute), float32 on the
    CPU (bf16 matmuls are slower there, and its rounding hurts the tiny models CPU runs use)."""
    if not _on_gpu(cfg):
        return "float32", ""
    if _gpu_has_bf16():
        return "bfloat16", ("model.dtype: auto -> bfloat16 on the GPU (autocast over float32 master weights; "
                            "model.dtype: float32 to compute in float32)")
    return "float32", "model.dtype: auto -> float32 (no bfloat16 support on this GPU)"


def _resolve_update_speedups(cfg: Config) -> None:
    """The update's speed switches left on auto -- model.torch_compile, model.mixed_precision and
    training.logprob_keep_logits -- on for the single-process actor on a CUDA device, off on the CPU
    (tiny models, where compiling costs more than it saves) and under Ray (the sharded workers
    compute in model.dtype already and refuse torch_compile). torch_compile also needs full
    fine-tuning (compiling peft's LoRA layers is untested on the GPU); mixed_precision: param_copy
    needs full fine-tuning in bfloat16/float16 and no training.offload_optimizer (its copy, 2 bytes a
    parameter, would stay through the optimizer step that offloading makes room for). On the H200,
    Qwen2.5-1.5B architecture, 32 prompts x 8 x 512 tokens, they took the update from 4.73 to 2.72 s
    a step (benchmarks/results/h200, e2e_b_tuned_all, docs/performance.md). The trainer logs what
    auto chose (cfg.training.auto_note)."""
    m, t = cfg.model, cfg.training
    single_gpu = _on_gpu(cfg) and cfg.distributed.backend != "ray"
    chosen = []
    if m.torch_compile is None:  # LoRA: peft's adapter layers inside the compiled layers are not measured yet
        m.torch_compile = single_gpu and m.lora.rank == 0
        chosen.append(f"model.torch_compile: {str(m.torch_compile).lower()}")
    if m.mixed_precision == "auto":
        copy = (single_gpu and m.lora.rank == 0 and m.dtype in ("bfloat16", "float16")
                and not t.offload_optimizer)
        m.mixed_precision = "param_copy" if copy else "autocast"
        chosen.append(f"model.mixed_precision: {m.mixed_precision}")
    if t.logprob_keep_logits is None:
        t.logprob_keep_logits = single_gpu
        chosen.append(f"training.logprob_keep_logits: {str(t.logprob_keep_logits).lower()}")
    t.auto_note = ""
    if single_gpu and chosen:
        t.auto_note = (f"auto on the GPU -> {', '.join(chosen)} (the update's speed switches; set them "
                       "to false / autocast for the plain path)")


def _gpu_has_bf16() -> bool:
    """Whether the visible CUDA device computes in bfloat16 (Ampere or newer). A device: cuda asked for
    where there is none is the trainer's error to report (verl.models.loading.resolve_device), not this."""
    import torch

    try:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    except (AssertionError, RuntimeError):  # a CPU-only build of torch: no CUDA device to ask
        return False


def _check_sglang(cfg: Config) -> None:
    """SGLang runs on CUDA only and is an extra of its own: say so when the config loads, not at
    the first step (no fallback to another engine)."""
    import importlib.util

    on_gpu = _on_gpu(cfg)
    if not on_gpu:
        raise ConfigError(f"rollout.name: sglang needs a CUDA GPU (SGLang has no CPU build) and device is "
                          f"{cfg.device}{' (no CUDA GPU here)' if cfg.device == 'auto' else ''}; "
                          "use rollout.name: vllm or rollout.name: hf")
    if cfg.model.dtype == "float32":
        raise ConfigError("model.dtype: float32 cannot be generated with rollout.name: sglang (its CUDA kernels, "
                          "e.g. RMSNorm, have no float32 path); use model.dtype: bfloat16 (the actor keeps float32 "
                          "master weights under autocast) or rollout.name: vllm")
    if importlib.util.find_spec("sglang") is None:
        raise ConfigError("rollout.name: sglang needs SGLang, which is not installed: pip install 'verl[sglang]' "
                          "(it cannot share an environment with verl[vllm])")


def check_cross_sections(cfg: Config) -> None:
    """Rules between sections, and the values derived from several of them."""
    from verl.algorithms.advantages import ESTIMATORS

    m, r, a, t, d, ck = cfg.model, cfg.rollout, cfg.algorithm, cfg.training, cfg.data, cfg.checkpoint
    if m.dtype == "auto":
        m.dtype, m.dtype_note = _default_dtype(cfg)
        m.validate("model")  # the rules that depend on the dtype (mixed_precision: param_copy)
    _resolve_update_speedups(cfg)
    if r.name == "auto":
        r.name, r.auto_note = _default_engine(cfg)
    if r.name == "sglang":
        _check_sglang(cfg)
    if t.use_packed_samples is None:  # auto (verl.config.training): packed on a GPU, padded elsewhere
        t.use_packed_samples = _on_gpu(cfg) and cfg.distributed.backend != "ray"
        t.packed_by_default = t.use_packed_samples  # the workers run padded where the model cannot pack
    if cfg.critic.share_actor and cfg.distributed.backend == "ray":
        raise ConfigError("critic.share_actor: not supported with distributed.backend: ray; "
                          "use a separate critic there (critic.share_actor: false)")
    # A static cache holds one dtype (verl.rollout.hf_rollout); full fine-tuning keeps float32
    # master weights (a LoRA base loads in model.dtype).
    if r.cache_implementation == "static" and not r.hf_weight_copy and m.lora.rank == 0 and m.dtype != "float32":
        raise ConfigError(f"rollout.cache_implementation: static under model.dtype: {m.dtype} autocast over the "
                          f"actor's float32 weights needs rollout.hf_weight_copy: true")

    # Samples per prompt: group estimators compare a prompt's samples.
    group = ESTIMATORS[a.adv_estimator].compares_group
    if r.n is None:
        r.n = 4 if group else 1
    if group and r.n < 2:
        raise ConfigError(f"rollout.n: {a.adv_estimator} compares samples within a group, so it needs n >= 2, "
                          f"got {r.n}")
    if r.seed is None:
        r.seed = cfg.seed
    budget_key = "rollout.multi_turn.max_total_tokens" if r.is_multi_turn else "rollout.max_new_tokens"
    if r.max_model_len is None:
        r.max_model_len = d.max_prompt_length + r.response_budget
    if r.max_model_len < d.max_prompt_length + r.response_budget:
        raise ConfigError(f"rollout.max_model_len: {r.max_model_len} is shorter than data.max_prompt_length + "
                          f"{budget_key} = {d.max_prompt_length + r.response_budget}")
    if t.critic_lr is None:
        t.critic_lr = 10 * t.lr

    # Batch arithmetic: sequences per step = prompts x samples; it must split evenly into
    # optimizer mini-batches, and those into micro-batches (no silent zero accumulation).
    seqs = t.batch_size * r.n
    at_most(seqs, MAX_SEQUENCES_PER_STEP, "training.batch_size",
            f"prompts per step x rollout.n {r.n} sequences must fit in memory")
    if t.mini_batch_size is None:
        t.mini_batch_size = seqs
    if seqs % t.mini_batch_size:
        raise ConfigError(f"training.mini_batch_size: {t.mini_batch_size} does not divide the {seqs} sequences per "
                          f"step (training.batch_size {t.batch_size} x rollout.n {r.n})")
    if t.micro_batch_size > t.mini_batch_size or t.mini_batch_size % t.micro_batch_size:
        raise ConfigError(f"training.micro_batch_size: {t.micro_batch_size} must divide training.mini_batch_size "
                          f"{t.mini_batch_size}")

    if cfg.distributed.backend == "ray":
        _check_ray(cfg)
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
    if ck.save_dir is None:
        ck.save_dir = _default_output_dir(cfg)


def _check_ray(cfg: Config) -> None:
    """What `distributed.backend: ray` cannot do, refused when the config loads (before Ray starts)."""
    m, t, d = cfg.model, cfg.training, cfg.distributed
    unsupported = [("model.lora.rank > 0", m.lora.rank > 0), ("model.torch_compile", m.torch_compile),
                   ("training.use_packed_samples", t.use_packed_samples),
                   ("training.offload_optimizer", t.offload_optimizer),
                   ("training.offload_idle_models", t.offload_idle_models)]
    for key_name, on in unsupported:
        if on:
            raise ConfigError(f"{key_name}: not supported with distributed.backend: ray yet (FSDP shards the "
                              "weights and optimizer instead); turn it off or use distributed.backend: none")
    if cfg.algorithm.adv_estimator == "optimal_token_baseline":
        raise ConfigError("algorithm.adv_estimator: optimal_token_baseline needs sum_v pi^2 from the actor's log-prob "
                          "pass, which the Ray actor ranks do not return yet; use distributed.backend: none")
    if d.rollout == "workers" and cfg.rollout.name != "vllm":
        raise ConfigError("distributed.rollout: 'workers' runs one vLLM engine per replica; set rollout.name: vllm "
                          "(or distributed.rollout: driver)")
    ranks = d.nnodes * d.devices_per_node
    if t.mini_batch_size < ranks:
        raise ConfigError(f"training.mini_batch_size: {t.mini_batch_size} sequences cannot feed {ranks} "
                          "data-parallel ranks (each rank needs at least one per mini-batch)")


def _check_async(cfg: Config) -> None:
    """Overlapping generation with the update needs an engine that does not generate with the very
    module being trained (under Ray too: the driver's engine, or the vLLM replica group)."""
    r = cfg.rollout
    if cfg.async_training.partial_rollout and r.is_multi_turn:
        raise ConfigError("async_training.partial_rollout: not with multi-turn rollouts (rollout.tools / "
                          "rollout.environment) yet: their turns are generated whole; set it to false")
    if cfg.async_training.streaming:
        _check_streaming(cfg)
    if cfg.async_training.engine_priority == "high" and not _on_gpu(cfg):
        raise ConfigError(f"async_training.engine_priority: high is a CUDA stream priority and device is "
                          f"{cfg.device}{' (no CUDA GPU here)' if cfg.device == 'auto' else ''}; set it to normal")
    if cfg.async_training.engine_priority == "high" and cfg.distributed.backend == "ray":
        raise ConfigError("async_training.engine_priority: high is for the driver's own engine thread, not under "
                          "distributed.backend: ray; set it to normal")
    if cfg.async_training.max_staleness > 0 and r.name == "hf" and not r.hf_weight_copy:
        raise ConfigError("async_training.max_staleness: > 0 generates while the actor trains, so the engine needs "
                          "weights of its own: set rollout.hf_weight_copy: true (or rollout.name: vllm), or "
                          "max_staleness: 0")


def _check_streaming(cfg: Config) -> None:
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
