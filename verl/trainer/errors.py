"""Errors the CLI turns into one-line messages (exit code 2 for bad input, 1 for runtime)."""

from verl.errors import ConfigError


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite steps; the message lists likely causes."""


__all__ = ["ConfigError", "TrainingDiverged"]
