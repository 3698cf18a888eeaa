"""`math_dapo` reward: real verl's DAPO-Math scorer on every row, whatever its data_source (real
verl's default for math_dapo, math, math_dapo_reasoning and aime*). The rule is
verl.rewards.real_verl_scores.math_dapo (exact parity): the last `Answer: ...` line of the last 300
characters, normalized, else the last `\\boxed{...}` of the final 100 as written; 1.0 right, -1.0
wrong. Its `acc` (right or not) is logged as `reward/math_dapo/acc`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

from verl.rewards.base import RewardFn, SampleError
from verl.rewards.by_data_source import with_extras
from verl.rewards.real_verl_scores.math_dapo import score


def build_math_dapo(cfg: RewardFnConfig) -> RewardFn:
    def math_dapo(prompts, responses, samples):
        results = []
        for response, s in zip(responses, samples):
            truth = s.get("ground_truth")
            if truth is None:
                results.append(SampleError("this reward needs sample['ground_truth'] (set data.answer_key)"))
            else:
                results.append(score(response, str(truth)))
        scores, details = with_extras(results)
        math_dapo.extra_metrics = details.metrics
        return scores

    math_dapo.isolate_errors = False  # failures are already per sample
    return math_dapo
