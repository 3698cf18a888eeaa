"""The reward both trainers use in `e2e_grpo.py`: cheap and rule-based, so the benchmark
times the RL system, not the scorer. Score = share of distinct characters, in [0, 1]."""


def _score(text: str) -> float:
    return len(set(text)) / max(1, len(text))


def reward(prompts, responses, samples):
    """verl's `python` reward signature."""
    return [_score(r) for r in responses]


def trl_reward(completions, **kwargs):
    """TRL's reward-function signature."""
    return [_score(c if isinstance(c, str) else str(c)) for c in completions]
