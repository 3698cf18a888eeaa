"""Rule rewards: string similarity to a target, keyword coverage, length penalty.

All scores are in [0, 1].
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import difflib

from verl.rewards.base import RewardFn, per_sample


def string_similarity(response: str, target: str) -> float:
    """difflib ratio 2*M / (len(a) + len(b)) of the stripped response and the target.

    M is the number of characters in matching blocks. 1.0 for an exact match, 0.0 when
    nothing matches; extra text around the target lowers the score. Case-sensitive.
    """
    a = response.strip()
    if a == target:
        return 1.0
    return difflib.SequenceMatcher(None, a, target, autojunk=False).ratio()


def keyword_fraction(response: str, keywords: list) -> float:
    """Fraction of `keywords` found in the response (case-insensitive substring)."""
    text = response.lower()
    return sum(1 for k in keywords if str(k).lower() in text) / len(keywords)


def length_score(response: str, target_length: int) -> float:
    """max(0, 1 - |len(response.strip()) - L| / L): 1 at exactly L characters, 0 at 0 or 2L."""
    n = len(response.strip())
    return max(0.0, 1.0 - abs(n - target_length) / target_length)


def build_string_match(cfg: RewardFnConfig) -> RewardFn:
    target = cfg.target
    return per_sample(lambda p, r, s: string_similarity(r, target), "string_match")


def build_keyword(cfg: RewardFnConfig) -> RewardFn:
    keywords = list(cfg.keywords)
    return per_sample(lambda p, r, s: keyword_fraction(r, keywords), "keyword")


def build_length_penalty(cfg: RewardFnConfig) -> RewardFn:
    target_length = cfg.target_length
    return per_sample(lambda p, r, s: length_score(r, target_length), "length_penalty")
