"""Our lenient verifiable math rewards (gsm8k, math, number, format): pure extraction/comparison helpers
and the scorers. Numbers compare exactly by value (no tolerance)."""

import pytest
import torch

from verl.batch import Batch
from verl.config import RewardFnConfig
from verl.rewards import RewardError, build_reward_manager
from verl.rewards.verifiable import (extract_boxed, extract_gsm8k_answer, extract_last_number, ground_truth_number,
                                     has_final_answer, math_answers_equal, normalize_math_answer, numbers_equal)


@pytest.mark.parametrize("text,strict,flexible", [
    ("so the total is #### 1,234", "1234", "1234"),
    ("#### -5.", "-5", "-5"),
    ("#### $ 12.50", "12.50", "12.50"),
    ("####72", "72", "72"),
    ("first #### 3 then corrected #### 4", "4", "4"),
    ("#### 42 because 6 * 7", "42", "42"),  # flexible prefers the '####' answer
    ("I have 3 apples and 5 pears, 8 in total.", None, "8"),
    ("It costs $1,000,000 or 2.50", None, "2.50"),
    ("10-3", None, "3"),  # a minus between numbers is not a sign
    ("the change is -7 dollars", None, "-7"),
    ("no answer at all", None, None),
    ("", None, None),
    ("#### many", None, None),
])
def test_extract_gsm8k_answer(text, strict, flexible):
    assert extract_gsm8k_answer(text, strict=True) == strict
    assert extract_gsm8k_answer(text, strict=False) == flexible


@pytest.mark.parametrize("text,expected", [
    ("1, 2, 3", "3"), ("value 1,234,567.", "1234567"), ("x2 and step3", None), ("-.5", "-.5"),
    ("room 101.", "101"), ("3.14 vs 2.71", "2.71"),
])
def test_extract_last_number(text, expected):
    assert extract_last_number(text) == expected


@pytest.mark.parametrize("a,b,equal", [
    ("3.0", "3", True), ("-0.50", "-.5", True), ("0.", "0", True), ("00", "0", True), (".5", "0.5", True),
    ("７２", "72", True),  # fullwidth digits read as digits (lenient)
    ("1234", "1234.0000001", False), ("1000001", "1000000", False),  # exact: no tolerance to exploit
    ("0.1", "0.10000000000000001", False),  # equal as floats, not as decimals
    ("7", "8", False), (None, "3", False), ("abc", "3", False), ("inf", "inf", False), ("nan", "nan", False),
])
def test_numbers_equal(a, b, equal):
    assert numbers_equal(a, b) is equal


@pytest.mark.parametrize("text,expected", [
    (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
    (r"\boxed{a^{b_{c}}}", r"a^{b_{c}}"),
    (r"first \boxed{1} and finally \boxed{ {2} + 3 }", r" {2} + 3 "),
    (r"\boxed 5.", "5"),
    (r"\fbox{7}", "7"),
    (r"\boxed{unbalanced", None),
    ("no box", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("pred,truth,equal", [
    (r"\dfrac{1}{2}", "0.5", True), (r"\frac12", r"\frac{1}{2}", True), ("x = 5", "5", True),
    (r"90^\circ", "90", True), (r"\text{(B)}", "(B)", True), ("1,000", "1000", True), ("3.", "3", True),
    (r"\left( 1, 2 \right)", "(1,2)", True), ("2/4", "0.5", True), (r"-\frac{3}{4}", "-0.75", True),
    (r"\frac{1}{3}", "0.33", False), ("", "0", False), (None, "1", False), ("x+1", "x+2", False),
    ("1000001", "1000000", False), (r"\frac{1000001}{1}", "1000000", False),  # exact values: no tolerance
    (r"\frac{1}{3}", "0.333333333", False), ("7/2", "3.5", True), (".5", r"\frac{1}{2}", True),
    ("1/0", "1/0", True), ("1/0", "2/0", False),  # same text is equal; a zero denominator has no value
])
def test_math_answers_equal(pred, truth, equal):
    assert math_answers_equal(pred, truth) is equal


def test_normalize_and_ground_truth():
    assert normalize_math_answer(r" $\tfrac{1}{2}$ ") == r"\frac{1}{2}"
    assert ground_truth_number("Natalia sold 48/2 = 24 clips ... #### 72") == "72"
    assert ground_truth_number("1,234") == "1234"
    assert ground_truth_number(r"\boxed{-3}") == "-3"
    with pytest.raises(ValueError, match="ground_truth"):
        ground_truth_number(None)


def test_has_final_answer():
    assert has_final_answer("work... #### 12")
    assert has_final_answer(r"so \boxed{x+1}")
    assert not has_final_answer("the answer is 12")
    assert not has_final_answer(r"\boxed{}")
    # the number after the mark must end the answer: an expression there is not a final answer
    assert has_final_answer("3 + 7 = 10\n#### 10.") and has_final_answer("#### 3 + 7 = 10\n#### 10")
    assert not has_final_answer("#### 3 + 7 = 10") and not has_final_answer("#### 12 apples and 3 pears")


def _batch(responses, truths):
    return Batch(prompt_text=["q"] * len(responses), response_text=responses, ground_truth=truths,
                 response_mask=torch.ones(len(responses), 2))


def test_gsm8k_scores_strict_and_flexible():
    responses = ["... #### 1,234", "answer: 1234", "#### 99", "no idea"]
    truths = ["step by step #### 1234"] * 4
    strict = build_reward_manager(RewardFnConfig(type="gsm8k", strict=True, format_score=0.1))
    scores, _ = strict.score(_batch(responses, truths))
    assert scores.tolist() == pytest.approx([1.0, 0.0, 0.1, 0.0])
    flexible = build_reward_manager(RewardFnConfig(type="gsm8k", strict=False))
    scores, metrics = flexible.score(_batch(responses, truths))
    assert scores.tolist() == [1.0, 1.0, 0.0, 0.0] and metrics["reward/gsm8k"] == 0.5


def test_math_number_format_scores():
    scores, _ = build_reward_manager(RewardFnConfig(type="math", format_score=0.2)).score(
        _batch([r"thus \boxed{\dfrac{1}{2}}.", r"\boxed{3}", "1/2"], [r"\frac{1}{2}", r"$\boxed{4}$", "0.5"]))
    assert scores.tolist() == pytest.approx([1.0, 0.2, 0.0])
    scores, _ = build_reward_manager(RewardFnConfig(type="number")).score(
        _batch(["I think 3, no, 3.0", "-2", "none"], ["3", "#### 2", "1"]))
    assert scores.tolist() == [1.0, 0.0, 0.0]
    scores, _ = build_reward_manager(RewardFnConfig(type="format")).score(
        _batch(["#### 5", r"\boxed{5}", "5"], []))
    assert scores.tolist() == [1.0, 1.0, 0.0]


def test_no_tolerance_hole_in_gsm8k_or_math():
    """'#### 1000001' against 1000000 scored 1 under the former relative tolerance of 1e-6."""
    truths = ["1000000", "#### 1000000"]
    for strict in (True, False):
        gsm8k = build_reward_manager(RewardFnConfig(type="gsm8k", strict=strict))
        scores, _ = gsm8k.score(_batch(["#### 1000001", "#### 1,000,000"], truths))
        assert scores.tolist() == [0.0, 1.0]
    math = build_reward_manager(RewardFnConfig(type="math"))
    scores, _ = math.score(_batch([r"\boxed{1000001}", r"\boxed{1,000,000}", r"\boxed{999999.9999}"],
                                  ["1000000", "1000000", r"\boxed{1000000}"]))
    assert scores.tolist() == [0.0, 1.0, 0.0]
    number = build_reward_manager(RewardFnConfig(type="number"))
    assert number.score(_batch(["it is 1000001", "it is 1000000.0"], truths))[0].tolist() == [0.0, 1.0]


def test_missing_ground_truth_is_a_sample_error():
    with pytest.raises(RewardError, match=r"gsm8k failed on sample 0 .*ground_truth"):
        build_reward_manager(RewardFnConfig(type="gsm8k")).score(_batch(["#### 1"], []))
    scores, metrics = build_reward_manager(RewardFnConfig(type="gsm8k", on_error="zero")).score(
        _batch(["#### 1", "#### 2"], ["1", None]))
    assert scores.tolist() == [1.0, 0.0] and metrics["reward/errors"] == 1.0
