"""`by_data_source` reward: each sample scored by the scorer its `data_source` names.

Real verl's default reward (`default_compute_score`, verl/utils/reward_score/__init__.py) picks the
scorer per sample from its `data_source`; a mixed GSM8K + MATH run scores each row with its own
rule. The same table here, over our own scorers (verl.rewards.verifiable):

    openai/gsm8k                                   gsm8k, strict: only '#### n' counts (real verl's default)
    lighteval/MATH, DigitalLearningGmbH/MATH-lighteval, HuggingFaceH4/MATH-500
                                                   math: the last \\boxed{...}
    math_dapo, math, math_dapo_reasoning, aime*    math_dapo: the last 'Answer: ...' (verl.rewards.math_dapo)
    hiyouga/geometry3k                             geo3k: <think> format + the last \\boxed{...} (verl.rewards.geo3k)

gsm8k and math score 1 for a correct answer, `format_score` (default 0, as real verl's) for a
wrong one that has the answer format, 0 otherwise; math_dapo scores 1 or -1; geo3k 0.9 x correct + 0.1 x formatted. A sample of any other data source is a per-sample
error naming it (real verl raises NotImplementedError there); `on_error` decides.
The manager reports each data source's mean as `reward/<data_source>/mean`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

from verl.rewards.base import RewardFn, SampleError

# data_source -> (our reward type, its settings): real verl's default_compute_score for these sources
DEFAULT_SCORERS = {
    "openai/gsm8k": ("gsm8k", {"strict": True}),
    "lighteval/MATH": ("math", {}),
    "DigitalLearningGmbH/MATH-lighteval": ("math", {}),
    "HuggingFaceH4/MATH-500": ("math", {}),
    "math_dapo": ("math_dapo", {}), "math": ("math_dapo", {}), "math_dapo_reasoning": ("math_dapo", {}),
    "hiyouga/geometry3k": ("geo3k", {}),
}
PREFIXES = {"aime": ("math_dapo", {})}  # data_source.startswith(prefix), as real verl's aime2024, aime_2025, ...
KNOWN = ", ".join([*DEFAULT_SCORERS, *(p + "*" for p in PREFIXES)])


def scorer_for(data_source) -> Optional[tuple[str, dict]]:
    """(our reward type, its settings) real verl's default_compute_score uses for `data_source`; None if none."""
    if data_source in DEFAULT_SCORERS:
        return DEFAULT_SCORERS[data_source]
    return next((s for p, s in PREFIXES.items() if str(data_source or "").startswith(p)), None)


def build_by_data_source(cfg: RewardFnConfig) -> RewardFn:
    from verl.rewards.registry import get_builder

    scorers = {}  # reward type -> batch function, built once
    for reward_type, settings in [*DEFAULT_SCORERS.values(), *PREFIXES.values()]:
        if reward_type not in scorers:
            sub = dataclasses.replace(cfg, type=reward_type, name=None, **settings)
            scorers[reward_type] = get_builder(reward_type)(sub)

    def by_data_source(prompts, responses, samples):
        out: list = [None] * len(responses)
        groups: dict[str, list[int]] = {}  # reward type -> sample indices, each scored as one batch
        for i, s in enumerate(samples):
            found = scorer_for(s.get("data_source"))
            if found is None:
                out[i] = SampleError(f"no default scorer for data_source {s.get('data_source')!r} (built in: "
                                     f"{KNOWN}); set reward_fn.type or a custom reward")
            else:
                groups.setdefault(found[0], []).append(i)
        for reward_type, idx in groups.items():
            scores = scorers[reward_type]([prompts[i] for i in idx], [responses[i] for i in idx],
                                          [samples[i] for i in idx])
            for i, v in zip(idx, scores):
                out[i] = v
        return out

    return by_data_source
