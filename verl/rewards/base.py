"""The reward-function contract and the error type.

A reward function scores a whole batch at once:

    fn(prompts: list[str], responses: list[str], samples: list[dict]) -> list[float]

Each sample dict has: ground_truth (str | None), data_source (str | None), extra (dict),
response_length (int, tokens), max_response_length (int), truncated (bool).

Built-in scorers that work one sample at a time are wrapped with `per_sample`; a sample
whose scorer raises becomes a `SampleError` entry, which the manager treats like a
non-number (zeroed and counted, or a `RewardError`, as `on_error` says).
"""

from __future__ import annotations

from typing import Callable, Optional

RewardFn = Callable[[list, list, list], list]


class RewardError(RuntimeError):
    """A reward function raised or returned something that is not a finite number."""


class SampleError:
    """Stands in for the score of one sample that could not be computed (never a number)."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message

    def __repr__(self) -> str:
        return f"SampleError({self.message!r})"


def per_sample(score_one: Callable[[str, str, dict], float], name: Optional[str] = None) -> RewardFn:
    """Lift `score_one(prompt, response, sample) -> float` to a batch reward function."""

    def fn(prompts, responses, samples):
        out = []
        for p, r, s in zip(prompts, responses, samples):
            try:
                out.append(score_one(p, r, s))
            except Exception as exc:  # recorded per sample; the manager applies on_error
                out.append(SampleError(f"{type(exc).__name__}: {exc}"))
        return out

    fn.__name__ = name or getattr(score_one, "__name__", "reward")
    return fn


def short(text, limit: int = 80) -> str:
    """One-line, at most ~`limit` characters: for error messages."""
    text = "" if text is None else str(text)
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
