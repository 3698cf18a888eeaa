"""The seed of step i: each step's randomness derives from (seed, i), so that a rerun, a resume and the
asynchronous producer (which generates step i's batch ahead of the step) all sample alike."""

from __future__ import annotations

import torch


def step_seed(seed: int, step: int) -> None:
    """Seed torch for step `step` (0-based) of a run seeded `seed`: seed * 1_000_003 + step (1_000_003 is
    prime and beyond any step count, so two (seed, step) pairs of ordinary runs never share a seed)."""
    torch.manual_seed(seed * 1_000_003 + step)
