"""Seed-compatible entry points: `from verl.utils import load_config`."""

from verl.config import load_config
from verl.errors import ConfigError

__all__ = ["load_config", "ConfigError"]
