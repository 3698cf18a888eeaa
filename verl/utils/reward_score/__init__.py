"""Real verl's rule-based scorers at their import paths (`from verl.utils.reward_score import
default_compute_score, gsm8k, math_dapo`), for reward and tool code written for real verl: each scores as
real verl 0.9's does (verl/rewards/real_verl_scores/, tested against real verl's own on a shared case set).
Data sources real verl scores with code execution or other packages (prime code, numina, ...) raise a
ValueError naming the source, as `data_source` routing does in main_ppo."""

from __future__ import annotations

from verl.rewards.real_verl_scores import compute_score as _by_source
from verl.utils.reward_score import gsm8k, math_dapo

__all__ = ["default_compute_score", "gsm8k", "math_dapo"]


def default_compute_score(data_source, solution_str, ground_truth, extra_info=None, sandbox_fusion_url=None,
                          concurrent_semaphore=None, memory_limit_mb=None, **kwargs):
    """A float, or math_dapo's {"score", "acc", "pred"}, as real verl's default_compute_score returns."""
    if sandbox_fusion_url:
        raise ValueError("sandbox_fusion_url: code-execution scoring is not built in here")
    return _by_source(data_source, solution_str, ground_truth)
