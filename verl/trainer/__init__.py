"""Seed-compatible entry points: `from verl.trainer import create_trainer`."""

from verl.trainer.trainer import Trainer, create_trainer

__all__ = ["Trainer", "create_trainer"]
