"""Real verl's default rule-based rewards, chosen by data_source: our own implementation of what
its `default_compute_score` (verl/utils/reward_score/__init__.py there) returns, matched exactly
(tests/real_verl/test_rewards_real_verl.py runs both on a shared case set through real verl's own code).

    compute_score("openai/gsm8k", "... #### 72", "72")   -> 1.0
    compute_score("math_dapo", "Answer: 7", "7")         -> {"score": 1.0, "acc": True, "pred": "7"}

Routing, tried in this order (names compared exactly, as real verl does):

    openai/gsm8k                                         gsm8k            (gsm8k.py)
    lighteval/MATH, DigitalLearningGmbH/MATH-lighteval,  hendrycks_math   (hendrycks_math.py)
      HuggingFaceH4/MATH-500
    math_dapo, math, math_dapo_reasoning, aime*          math_dapo        (math_dapo.py; a dict result)
    numina_aops_forum, numina_synthetic_math, ...        real verl's prime_math: not built in here
    codecontests, apps, codeforces, taco                 code             (code.py: the program runs against the
                                                                           row's tests in verl's sandbox)
    hiyouga/geometry3k                                   geo3k            (verl.rewards.geo3k)
    searchR1_nq, searchR1_triviaqa, ...                  search_r1        (search_r1.py)

A name real verl routes to a scorer not built in here raises `NotBuiltIn`; any other name raises
`UnknownSource` (real verl raises NotImplementedError). Numbers are returned as floats, as real
verl's default_compute_score does.
"""

from __future__ import annotations

from typing import Callable, Optional

from verl.rewards.real_verl_scores import code, gsm8k, hendrycks_math, math_dapo, search_r1

MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
DAPO_SOURCES = ("math_dapo", "math", "math_dapo_reasoning")
DAPO_PREFIX = "aime"
NUMINA_SOURCES = ("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc",
                  "numina_cn_k12", "numina_olympiads")
CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
SEARCH_SOURCES = ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                  "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle")
BUILT_IN = ", ".join(["openai/gsm8k", *MATH_SOURCES, *DAPO_SOURCES, DAPO_PREFIX + "*", "hiyouga/geometry3k",
                      "searchR1_* (7 names)", *CODE_SOURCES])


class UnknownSource(ValueError):
    """Real verl's default_compute_score has no scorer for this data_source."""


class NotBuiltIn(ValueError):
    """Real verl scores this data_source with a scorer this project does not implement."""


def _geo3k(response: str, ground_truth) -> float:
    from verl.rewards.geo3k import geo3k_score  # sympy is imported only when a geometry row is scored

    return geo3k_score(response, ground_truth)


SCORERS: dict[str, Callable] = {"gsm8k": gsm8k.score, "hendrycks_math": hendrycks_math.score,
                                "math_dapo": math_dapo.score, "geo3k": _geo3k, "search_r1": search_r1.score,
                                "code": code.score}


def scorer_name(data_source) -> Optional[str]:
    """The scorer real verl's default_compute_score picks for `data_source` (a key of SCORERS), or None."""
    if data_source == "openai/gsm8k":
        return "gsm8k"
    if data_source in MATH_SOURCES:
        return "hendrycks_math"
    if data_source in DAPO_SOURCES or (isinstance(data_source, str) and data_source.startswith(DAPO_PREFIX)):
        return "math_dapo"
    if data_source == "hiyouga/geometry3k":
        return "geo3k"
    if data_source in SEARCH_SOURCES:
        return "search_r1"
    if data_source in CODE_SOURCES:
        return "code"
    return None


def check_source(data_source) -> str:
    """The scorer's name for `data_source`; NotBuiltIn / UnknownSource (naming it) when there is none."""
    name = scorer_name(data_source)
    if name is not None:
        return name
    if data_source in NUMINA_SOURCES:
        raise NotBuiltIn(f"data_source {data_source!r}: real verl scores it with its prime_math scorer, which is "
                         f"not built in here; give a custom reward (reward_fn.type: python)")
    raise UnknownSource(f"no default scorer for data_source {data_source!r} (built in: {BUILT_IN}); set "
                        f"reward_fn.type or a custom reward")


def compute_score(data_source, response: str, ground_truth):
    """What real verl's default_compute_score(data_source, response, ground_truth) returns: a float,
    or math_dapo's dict {"score", "acc", "pred"}."""
    result = SCORERS[check_source(data_source)](response, ground_truth)
    return result if isinstance(result, dict) else float(result)
