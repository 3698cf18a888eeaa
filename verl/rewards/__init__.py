"""Reward functions: rule scorers, verifiable math answers, Hugging Face reward models,
HTTP reward APIs, user Python functions, and weighted combinations of them.

    from verl.rewards import build_reward_manager
    scores, metrics = build_reward_manager(cfg.reward_fn).score(batch)

See docs/rewards.md for every type, its keys and formulas.
"""

from verl.rewards.base import RewardError, RewardFn, SampleError, per_sample
from verl.rewards.manager import RewardManager, build_reward_manager, build_samples
from verl.rewards.registry import REWARD_TYPES

__all__ = ["RewardManager", "build_reward_manager", "build_samples", "RewardError", "RewardFn", "SampleError",
           "per_sample", "REWARD_TYPES"]
