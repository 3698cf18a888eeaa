"""Which roles an algorithm needs, decided here once (the local and the Ray backends both ask).

    needs_critic(cfg.algorithm)     the estimator reads values V(s_t) (gae)
    needs_reference(cfg.algorithm)  KL to the starting policy, in the reward or as a loss
"""

from __future__ import annotations

from verl.algorithms.advantages import ESTIMATORS


def needs_critic(algorithm) -> bool:
    return ESTIMATORS[algorithm.adv_estimator].needs_critic


def needs_reference(algorithm) -> bool:
    return bool(algorithm.use_kl_in_reward or algorithm.use_kl_loss)


def needs_greedy_baseline(algorithm) -> bool:
    """ReMax: the reward of each prompt's greedy answer is its baseline (one extra rollout)."""
    return ESTIMATORS[algorithm.adv_estimator].greedy_baseline
