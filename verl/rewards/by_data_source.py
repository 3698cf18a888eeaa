"""`by_data_source` reward: each sample scored as real verl's default reward scores it.

Real verl's default reward (`default_compute_score`, verl/utils/reward_score/__init__.py there)
picks the scorer per sample from its `data_source`; a mixed GSM8K + MATH run scores each row with
its own rule. This type does the same with our exact re-implementation of those scorers
(verl.rewards.real_verl_scores, which lists the routing): `openai/gsm8k` reads `#### n` in the last
300 characters and compares strings, the MATH sources the Hendrycks `\\boxed{}` equivalence,
math_dapo / math / math_dapo_reasoning / aime* DAPO's `Answer:` rule (+1 / -1),
hiyouga/geometry3k the geo3k rule, searchR1_* the Search-R1 exact match, codecontests / apps / codeforces /
taco the response's program run against the row's tests in verl's sandbox. They are not our lenient
`gsm8k` / `math` types (verl.rewards.verifiable): the score of every row equals real verl's.

Real verl's fixed settings apply (format score 0; `reward_fn.format_score` is not read). A sample
whose data_source real verl does not know, or routes to a scorer not built in here (numina_*:
prime_math), is a per-sample error naming
it (real verl raises there too); `on_error` decides. DAPO's `acc` is logged as
`reward/<name>/acc` (the mean over the rows that have it; real verl's reward_extra_info), and the
manager reports each data source's mean as `reward/<data_source>/mean`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

from verl.rewards import real_verl_scores
from verl.rewards.base import RewardFn, SampleError
from verl.rewards.compute_score import ScoreDetails

KNOWN = real_verl_scores.BUILT_IN
# scorer -> the reward type that is that same scorer on every row (main_ppo names it for one source)
REWARD_TYPES = {"math_dapo": "math_dapo", "geo3k": "geo3k"}


def scorer_for(data_source) -> Optional[str]:
    """Name of the scorer real verl's default_compute_score uses for `data_source` (built in here); None if none."""
    return real_verl_scores.scorer_name(data_source)


def reward_type_for(data_sources) -> str:
    """The reward type scoring rows of these data sources as real verl does: the scorer's own type
    when they share one that is a reward type (math_dapo, geo3k), else `by_data_source`."""
    names = {scorer_for(s) for s in data_sources}
    return REWARD_TYPES.get(names.pop(), "by_data_source") if len(names) == 1 else "by_data_source"


def with_extras(results: list) -> tuple[list, ScoreDetails]:
    """Scores of real-verl results (numbers, dicts with "score", SampleErrors) and their extra numbers
    (a bool such as DAPO's `acc` counts as 0 / 1)."""
    details = ScoreDetails()
    scores = [r if isinstance(r, SampleError) else details.take(
        {k: float(v) if isinstance(v, bool) else v for k, v in r.items()} if isinstance(r, dict) else r)
        for r in results]
    return scores, details


def score_rows(responses: list, samples: list) -> list:
    """real_verl_scores.compute_score per row; a row that raises becomes a SampleError."""
    out = []
    for response, s in zip(responses, samples):
        try:
            out.append(real_verl_scores.compute_score(s.get("data_source"), response, s.get("ground_truth")))
        except (real_verl_scores.UnknownSource, real_verl_scores.NotBuiltIn) as exc:
            out.append(SampleError(str(exc)))
        except Exception as exc:  # e.g. a Search-R1 ground truth without "target"
            out.append(SampleError(f"{type(exc).__name__}: {exc}"))
    return out


def build_by_data_source(cfg: RewardFnConfig) -> RewardFn:
    def by_data_source(prompts, responses, samples):
        scores, details = with_extras(score_rows(responses, samples))
        by_data_source.extra_metrics = details.metrics
        return scores

    by_data_source.isolate_errors = False  # failures are already per sample
    return by_data_source
