"""Real verl's `verl.utils.reward_score.math_dapo.compute_score` (its default, Minerva-style check with the
\\boxed{} fallback): {"score": 1.0 or -1.0, "acc", "pred"}. strict_box_verify and pause tokens are not
built in here: asking for them is a ValueError."""

from __future__ import annotations

from typing import Optional

from verl.rewards.real_verl_scores.math_dapo import score

__all__ = ["compute_score"]


def compute_score(solution_str: str, ground_truth: str, strict_box_verify: bool = False,
                  pause_tokens_index: Optional[list] = None) -> dict:
    if strict_box_verify or pause_tokens_index:
        raise ValueError("math_dapo.compute_score: strict_box_verify and pause_tokens_index are not supported here")
    return score(solution_str, ground_truth)
