"""`math_dapo` (real verl's DAPO-Math scorer, verl/rewards/real_verl_scores/math_dapo.py) and its routing by
data_source; tests/real_verl/test_rewards_real_verl.py compares it with real verl's own code on many more cases."""

import pytest

from verl.config import RewardFnConfig, build_section
from verl.rewards.by_data_source import scorer_for
from verl.rewards.manager import RewardManager
from verl.rewards.real_verl_scores.math_dapo import judge, normalize_final_answer


def dapo_correct(response: str, truth: str) -> bool:
    return judge(response, truth)[0]


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
    # real verl's own boxes only: '\\boxed{...}' exactly, the last one (not a later '\\boxed 9' or '\\fbox{9}')
    assert dapo_correct("\\boxed{7} \\boxed 9", "7") and dapo_correct("\\boxed{7} \\fbox{9}", "7")
    assert not dapo_correct("\\boxed 7", "7") and not dapo_correct("\\fbox{7}", "7")


def test_invalid_answer_line_falls_back_to_the_box_and_pred_is_reported():
    # 'Answer: [INVALID]' normalizes to '[INVALID]', real verl's marker for "no answer line": the box decides
    assert judge("Answer: [INVALID]\n\\boxed{7}", "7") == (True, "7")
    assert judge("Answer: $1,000$", "1000") == (True, "1000")  # pred: the normalized answer
    assert judge("nothing", "7") == (False, "[INVALID]")
    assert judge("nothing", "[INVALID]") == (True, "[INVALID]")  # a truth that normalizes to the marker


def test_scores_are_plus_minus_one_and_routed_by_data_source():
    assert scorer_for("math_dapo") == "math_dapo" and scorer_for("aime_2025") == "math_dapo"
    assert scorer_for("openai/gsm8k") == "gsm8k" and scorer_for("numina_olympiads") is None
    manager = RewardManager(build_section(RewardFnConfig, {"type": "by_data_source"}, "reward_fn"))
    samples = [{"ground_truth": "7", "data_source": "math_dapo"}, {"ground_truth": "7", "data_source": "aime2024"},
               {"ground_truth": "7", "data_source": "openai/gsm8k"}]
    scores, metrics = manager._score_lists(["p"] * 3, ["Answer: 7", "Answer: 8", "#### 8"], samples)[:2]
    # right (1), wrong (-1: DAPO's reward), wrong gsm8k answer (0)
    assert scores == [1.0, -1.0, 0.0]
    assert (metrics["reward/math_dapo/mean"], metrics["reward/aime2024/mean"]) == (1.0, -1.0)
    assert metrics["reward/by_data_source/acc"] == 0.5  # DAPO's acc over its two rows (the gsm8k row has none)
