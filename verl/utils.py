"""Seed-compatible entry points: `from verl.utils import load_config`."""

from verl.config import ConfigError, load_config

__all__ = ["load_config", "ConfigError"]
