"""The whole config: its sections and the two top-level keys; `finalize()` applies the preset, fills
the auto and derived values (verl/config/auto.py, on the platform probed here) and checks the rules
between sections (verl/config/checks.py, the only place those live)."""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass

from verl.config.algorithm import AlgorithmConfig, apply_preset
from verl.config.async_training import AsyncTrainingConfig
from verl.config.checkpoint import CheckpointConfig
from verl.config.critic import CriticConfig
from verl.config.data import DataConfig
from verl.config.distillation import DistillationConfig
from verl.config.distributed import DistributedConfig
from verl.config.auto import Platform, resolve_auto
from verl.config.checks import check, check_platform
from verl.config.keys import Section, is_key, key, resume_safe_keys
from verl.config.logging_section import LoggingConfig
from verl.config.model import ModelConfig
from verl.config.reward_fn import RewardFnConfig
from verl.config.rollout import RolloutConfig, check_seed
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
    distillation: DistillationConfig = key(factory=DistillationConfig)
    seed: int = 42
    device: str = key("auto", resume_safe=True)  # auto | cpu | cuda | cuda:N

    def validate(self, path: str) -> None:
        check_seed(self.seed, "seed")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ConfigError(f"device: '{self.device}' is not one of auto, cpu, cuda, cuda:N")

    def finalize(self, platform: Platform | None = None) -> "Config":
        """The preset, every section's checks (again: Python code may have changed a section
        after it was built), then the auto and derived values and the rules between sections.
        platform: what to resolve auto for (`verl plan --card` plans a GPU run elsewhere); None:
        this machine, probed."""
        apply_preset(self.algorithm)
        for f in dataclasses.fields(self):
            section = getattr(self, f.name)
            if isinstance(section, Section):
                section.check(f.name)
        self.validate("")
        platform = platform or probe_platform(self)
        resolve_auto(self, platform)
        check_platform(self, platform)
        check(self)
        return self

    def auto_notes(self) -> list[str]:
        """What auto chose on this platform (model.dtype, rollout.name, the update's speed switches), the
        lines the run logs at its start (none on the CPU), and a micro-batch other than the usual one."""
        notes = (self.model.dtype_note, self.rollout.auto_note, self.training.auto_note, self.training.micro_note)
        return [n for n in notes if n]

    def carry_derived(self, earlier: "Config") -> "Config":
        """This config, rebuilt from `earlier.to_dict()` (plus new values), with `earlier`'s derived fields
        (what auto chose, its notes, the config file): to_dict wrote auto's choices as plain values, so the
        rebuild chose nothing itself and its own derived fields are their defaults."""
        for f in dataclasses.fields(self):
            section, before = getattr(self, f.name), getattr(earlier, f.name)
            if not isinstance(section, Section):
                continue
            for field in dataclasses.fields(section):
                if field.metadata.get("derived") and getattr(section, field.name) == field.default:
                    setattr(section, field.name, getattr(before, field.name))
        return self

    def to_dict(self) -> dict:
        """The keys as plain data (what a checkpoint saves and the tracker logs); derived fields are left out."""
        return _keys_only(self)

    @classmethod
    def resume_safe_keys(cls) -> tuple[str, ...]:
        """Keys that may change between a checkpoint and its resume (declared `resume_safe` on each
        key, or RESUME_SAFE on a section): they do not change the training math."""
        return tuple(resume_safe_keys(cls))

    @property
    def output_dir(self) -> str:
        return self.checkpoint.save_dir  # resolved by finalize()


def probe_platform(cfg: Config) -> Platform:
    """What this machine offers cfg.device (verl/config/auto.py's Platform): probed here, once, so that
    the rules that read it are plain functions."""
    import importlib.util

    gpu = _on_gpu(cfg)
    return Platform(gpu=gpu, bf16=gpu and _gpu_has_bf16(), vllm=gpu and importlib.util.find_spec("vllm") is not None,
                    sglang=importlib.util.find_spec("sglang") is not None)


def _on_gpu(cfg: Config) -> bool:
    if cfg.device == "auto":
        import torch

        return torch.cuda.is_available()
    return cfg.device.startswith("cuda")


def _gpu_has_bf16() -> bool:
    """Whether the visible CUDA device computes in bfloat16 (Ampere or newer). A device: cuda asked for
    where there is none is the trainer's error to report (verl.models.loading.resolve_device), not this."""
    import torch

    try:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    except (AssertionError, RuntimeError):  # a CPU-only build of torch: no CUDA device to ask
        return False


def _keys_only(value):
    """A config value as plain data, without the derived fields (keys.derived) of its sections."""
    if isinstance(value, Section):
        return {f.name: _keys_only(getattr(value, f.name)) for f in dataclasses.fields(value) if is_key(f)}
    if isinstance(value, (list, tuple)):
        return type(value)(_keys_only(v) for v in value)
    if isinstance(value, dict):
        return {k: _keys_only(v) for k, v in value.items()}
    return copy.deepcopy(value)
