"""The seed of step i: each step's randomness derives from (seed, i), so that a rerun, a resume and the
asynchronous producer (which generates step i's batch ahead of the step) all sample alike. The rollout's
draws use a generator of their own seeded with draw_seed (SamplingParams.draw_seed), so the producer
never reseeds torch's global generator, which the trainer's thread seeds with step_seed."""

from __future__ import annotations

import torch


def draw_seed(seed: int, step: int) -> int:
    """The seed of step `step` (0-based) of a run seeded `seed`: seed * 1_000_003 + step (1_000_003 is
    prime and beyond any step count, so two (seed, step) pairs of ordinary runs never share a seed)."""
    return seed * 1_000_003 + step


def step_seed(seed: int, step: int) -> None:
    """Seed torch's global generator for step `step` (the trainer's thread: the update's randomness)."""
    torch.manual_seed(draw_seed(seed, step))
