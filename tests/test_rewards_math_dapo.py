"""`math_dapo` (real verl's DAPO-Math scorer) and its routing by data_source (verl/rewards/math_dapo.py)."""

import pytest

from verl.config import RewardFnConfig, build_section
from verl.rewards.by_data_source import scorer_for
from verl.rewards.manager import RewardManager
from verl.rewards.math_dapo import dapo_correct, normalize_final_answer


@pytest.mark.parametrize("text, expected", [
    ("$1,000$ dollars", "1000"),  # the first $...$ span kept, '$' dropped, the unit word dropped, commas of an integer
    ("x = \\frac12", "\\frac{1}{2}"),  # after the last '='; ' ' removed; frac12 -> frac{1}{2}
    ("\\text{(A)}", "(A)"),  # \text{} unwrapped
    ("90^\\circ", "90"),  # degree marks dropped
    ("\\boxed{5}", "5"),
    ("1,234.5", "1,234.5"),  # commas stay unless the rest is an integer
    ("an apple", "apple"),  # "an " removed (real verl's first replacement); no "a " is left after it
])
def test_normalize_final_answer(text, expected):
    assert normalize_final_answer(text) == expected


def test_answer_line_then_last_box_in_the_tail():
    assert dapo_correct("work...\nAnswer: $1,000$", "1000")  # normalized on both sides
    assert dapo_correct("answer: 7 apples\nmore", "7") is False  # 'apples' is no unit word: '7apples' != '7'
    assert dapo_correct("so \\boxed{7}", "7")  # no Answer: line -> the box, compared as written
    assert not dapo_correct("so \\boxed{ 7}", "7")  # ... not normalized: ' 7' != '7'
    assert not dapo_correct("\\boxed{7}" + "x" * 100, "7")  # the box must be within the last 100 characters
    assert not dapo_correct("Answer: 7" + "x" * 300, "7")  # only the last 300 characters are read
    assert not dapo_correct("no answer at all", "7")


def test_scores_are_plus_minus_one_and_routed_by_data_source():
    assert scorer_for("math_dapo") == ("math_dapo", {}) and scorer_for("aime_2025") == ("math_dapo", {})
    assert scorer_for("openai/gsm8k") == ("gsm8k", {"strict": True}) and scorer_for("numina_olympiads") is None
    manager = RewardManager(build_section(RewardFnConfig, {"type": "by_data_source"}, "reward_fn"))
    samples = [{"ground_truth": "7", "data_source": "math_dapo"}, {"ground_truth": "7", "data_source": "aime2024"},
               {"ground_truth": "7", "data_source": "openai/gsm8k"}]
    scores, metrics = manager._score_lists(["p"] * 3, ["Answer: 7", "Answer: 8", "#### 8"], samples)[:2]
    # right (1), wrong (-1: DAPO's reward), wrong gsm8k answer (0)
    assert scores == [1.0, -1.0, 0.0]
    assert (metrics["reward/math_dapo/mean"], metrics["reward/aime2024/mean"]) == (1.0, -1.0)
