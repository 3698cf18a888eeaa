"""Rewards of multi-turn agent trajectories (verl/rollout/multi_turn.py writes what they read).

    environment  the environment's own reward: the sum of its step rewards (extra["env_reward"])
    tool_call    1.0 when the trajectory made at least one tool call that ran without error,
                 format_score (default 0) when it only made malformed or failed calls, 0 without
                 any call: the format reward for learning to call tools at all
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl.rewards.base import RewardFn, per_sample

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig


def _turns(sample: dict) -> list:
    return (sample.get("extra") or {}).get("turns") or []


def tool_call_score(sample: dict, format_score: float = 0.0) -> float:
    tools = [t for t in _turns(sample) if t.get("role") == "tool"]
    if any(t.get("ok") for t in tools):
        return 1.0
    return format_score if tools else 0.0


def build_environment(cfg: "RewardFnConfig") -> RewardFn:
    return per_sample(lambda p, r, s: float((s.get("extra") or {}).get("env_reward", 0.0)), "environment")


def build_tool_call(cfg: "RewardFnConfig") -> RewardFn:
    format_score = cfg.format_score
    return per_sample(lambda p, r, s: tool_call_score(s, format_score), "tool_call")
