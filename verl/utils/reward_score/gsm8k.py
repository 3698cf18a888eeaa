"""Real verl's `verl.utils.reward_score.gsm8k`: compute_score and extract_solution (strict / flexible)."""

from __future__ import annotations

from verl.rewards.real_verl_scores.gsm8k import compute_score, extract_answer, extract_flexible

__all__ = ["compute_score", "extract_solution"]


def extract_solution(solution_str: str, method: str = "strict"):
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    return extract_answer(solution_str) if method == "strict" else extract_flexible(solution_str)
