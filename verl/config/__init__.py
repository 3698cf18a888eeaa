"""Typed configuration: every key verl reads, one module per section.

    cfg = load_config("config.yaml", ["training.lr=1e-5"])   # validated, derived values filled

Each section's dataclass (model.py, rollout.py, algorithm.py, training.py, reward_fn.py,
critic.py, data.py, logging_section.py, checkpoint.py, distributed.py, distillation.py) owns its keys: default,
allowed values (from the module that implements them), bounds, its own checks and whether a
key may change on resume (keys.py declares how). root.py holds the whole Config and the rules
between sections; build.py turns YAML (yaml_io.py, paths.py) and overrides into a Config.
Unknown keys, wrong types and impossible values raise ConfigError naming the key path.
"""

from verl.config.algorithm import (AlgorithmConfig, DynamicSamplingConfig, KLControlConfig, OverlongPenaltyConfig,
                                   apply_preset)
from verl.config.async_training import AsyncTrainingConfig
from verl.config.build import build_section, config_from_dict, load_config
from verl.config.checkpoint import CheckpointConfig
from verl.config.critic import CriticConfig
from verl.config.data import DataConfig
from verl.config.distillation import DistillationConfig
from verl.config.distributed import DistributedConfig
from verl.config.keys import did_you_mean, resume_safe_keys
from verl.config.logging_section import LoggingConfig
from verl.config.model import LoraConfig, ModelConfig
from verl.config.paths import resolve_relative_paths
from verl.config.reward_fn import RewardFnConfig
from verl.config.rollout import MultiTurnConfig, RolloutConfig
from verl.config.root import Config
from verl.config.training import TrainingConfig
from verl.config.yaml_io import parse_overrides, read_yaml
from verl.errors import ConfigError

__all__ = ["AlgorithmConfig", "AsyncTrainingConfig", "CheckpointConfig", "Config", "ConfigError", "CriticConfig", "DataConfig",
           "DistillationConfig", "DistributedConfig", "DynamicSamplingConfig", "KLControlConfig", "LoggingConfig", "LoraConfig",
           "ModelConfig", "MultiTurnConfig", "OverlongPenaltyConfig", "RewardFnConfig", "RolloutConfig", "TrainingConfig",
           "apply_preset", "build_section", "config_from_dict", "did_you_mean", "load_config", "parse_overrides",
           "read_yaml", "resolve_relative_paths", "resume_safe_keys"]
