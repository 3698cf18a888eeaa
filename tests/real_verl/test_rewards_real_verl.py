"""Rule-based rewards by data_source against real verl 0.9.1's own `default_compute_score`.

The shared case set (tests/real_verl_reward_cases.py, ~5,700 cases over every data_source real
verl routes to a rule built in here, and names it does not know) is scored once by real verl in
its own process (tests/real_verl_oracle.py) and by our `by_data_source` reward; every case must
agree: the score, DAPO's `acc` and `pred`, and an error where real verl raises.
"""

import pytest
from real_verl_reward_cases import reward_cases
from real_verl_runner import require_real_verl, run_real_verl

from verl.config import RewardFnConfig
from verl.rewards.base import SampleError
from verl.rewards.by_data_source import build_by_data_source
from verl.rewards.manager import RewardManager
from verl.rewards.real_verl_scores import compute_score, gsm8k, hendrycks_math, math_dapo, search_r1

CASES = reward_cases()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    require_real_verl("verl", "utils", "reward_score", "__init__.py")
    require_real_verl("mathruler")
    return run_real_verl([dict(kind="score", **c) for c in CASES], tmp_path_factory.mktemp("rewards"))


def _ours(results) -> list:
    return [dict(error=True) if isinstance(r, SampleError) else dict(score=r) for r in results]


def _theirs(r: dict) -> dict:
    return dict(error=True) if "error" in r else dict(score=r["score"])


def _report(differ: list) -> str:
    lines = [f"{len(differ)} of {len(CASES)} cases differ; the first ones:"]
    for c, ours, theirs in differ[:15]:
        lines.append(f"  {c['data_source']!r} response={c['response'][-120:]!r} truth={c['ground_truth']!r}: "
                     f"ours {ours}, real verl {theirs}")
    return "\n".join(lines)


def test_the_case_set_covers_every_rule():
    sources = {c["data_source"] for c in CASES}
    assert len(CASES) >= 2400
    assert {"openai/gsm8k", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
            "math_dapo", "math", "math_dapo_reasoning", "aime2024", "hiyouga/geometry3k", "searchR1_nq",
            "searchR1_bamboogle", "my_dataset"} <= sources


def test_by_data_source_scores_every_case_as_real_verl(real):
    fn = build_by_data_source(RewardFnConfig(type="by_data_source"))
    got = _ours(fn([""] * len(CASES), [c["response"] for c in CASES],
                   [dict(data_source=c["data_source"], ground_truth=c["ground_truth"]) for c in CASES]))
    want = [_theirs(r) for r in real]
    differ = [(c, a, b) for c, a, b in zip(CASES, got, want) if a != b]
    assert not differ, _report(differ)
    scores = {w["score"] for w in want if "score" in w}
    assert {-1.0, 0.0, 0.1, 0.25, 0.9, 1.0} <= scores  # every scorer's outcomes, both ways
    assert sum("error" in w for w in want) >= 50  # names real verl does not know


def test_dapo_acc_and_pred_equal_real_verls(real):
    differ = []
    for c, r in zip(CASES, real):
        if "acc" in r:
            ours = compute_score(c["data_source"], c["response"], c["ground_truth"])
            if ours != r:
                differ.append((c, ours, r))
    assert not differ, _report(differ)
    assert sum("acc" in r for r in real) > 600
    assert {"[INVALID]", "13", "1000"} <= {r["pred"] for r in real if "acc" in r}


def test_the_native_lenient_types_are_not_what_real_verl_scores(real):
    """The cases tell the rules apart: our lenient `gsm8k` (flexible) and `math` types disagree with real
    verl on many of them (so a routing slip back to them would fail the test above)."""
    for reward_type, source in [("gsm8k", "openai/gsm8k"), ("math", "lighteval/MATH")]:
        manager = RewardManager(RewardFnConfig(type=reward_type, on_error="zero"))
        idx = [i for i, c in enumerate(CASES) if c["data_source"] == source]
        ours = manager([""] * len(idx), [CASES[i]["response"] for i in idx],
                       [dict(ground_truth=CASES[i]["ground_truth"]) for i in idx])
        differ = sum(a != real[i]["score"] for a, i in zip(ours, idx))
        assert differ >= 20, (reward_type, differ)


def test_real_verl_metrics_through_the_manager():
    manager = RewardManager(RewardFnConfig(type="by_data_source", on_error="zero"))
    samples = [dict(data_source="math_dapo", ground_truth="7"), dict(data_source="aime2024", ground_truth="7"),
               dict(data_source="openai/gsm8k", ground_truth="7"), dict(data_source="numina_olympiads",
                                                                         ground_truth="7")]
    scores, metrics, _ = manager._score_lists([""] * 4, ["Answer: 7", "Answer: 8", "#### 7", "7"], samples)
    assert scores == [1.0, -1.0, 1.0, 0.0]
    assert metrics["reward/by_data_source/acc"] == 0.5 and metrics["reward/errors"] == 1.0


# ---------------------------------------------------------------------------- hand-derived cases


@pytest.mark.parametrize("response, truth, expected", [
    ("#### 72", "72", 1.0),
    ("#### 1,000", "1000", 1.0),  # commas dropped
    ("#### 1000001", "1000000", 0.0),  # strings compared: no tolerance
    ("#### 72.", "72", 0.0),  # '72.' != '72'
    ("#### 072", "72", 0.0),  # no leading-zero folding
    ("####72", "72", 0.0),  # one space after '####' is required
    ("#### $72", "72", 0.0),  # '$' is not part of the pattern
    ("#### ７２", "72", 0.0),  # [0-9] is ASCII only
    ("#### 5\n#### 72", "72", 1.0),  # the last marker
    ("#### 72" + "x" * 300, "72", 0.0),  # outside the last 300 characters
])
def test_gsm8k_by_hand(response, truth, expected):
    assert gsm8k.score(response, truth) == expected


@pytest.mark.parametrize("response, truth, expected", [
    ("\\boxed{\\frac12}", "\\frac{1}{2}", 1.0),  # \frac12 -> \frac{1}{2}
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),  # exactly '0.5' becomes \frac{1}{2}
    ("\\boxed{7/2}", "3.5", 0.0),  # 7/2 -> \frac{7}{2}, not 3.5
    ("\\boxed{10\\%}", "10", 1.0),  # '\%' dropped
    ("\\boxed{10%}", "10", 0.0),  # ... a bare '%' is not
    ("\\boxed{1,000}", "1000", 0.0),  # commas stay
    ("\\boxed{\\text{5}}", "5", 0.0),  # \text{} stays
    ("\\boxed{5 \\text{ cm}}", "5", 1.0),  # a '\text{ ' unit on the right dropped
    ("\\boxed{\\sqrt3}", "\\sqrt{3}", 1.0),  # \sqrt3 -> \sqrt{3}
    ("\\fbox{5}", "5", 0.0),  # found, but not \boxed{...}: no answer
    ("\\boxed 7 and later \\boxed{5}", "5", 0.0),  # any '\boxed ' wins: the answer is '7 and later \boxed{5}'
    ("\\boxed{5} then \\boxed 7$.", "7", 1.0),  # ... up to the next '$'
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}", 1.0),  # nested braces
    ("\\boxed{x=5}", "5", 1.0),  # 'x=' (two characters at most) dropped
])
def test_hendrycks_math_by_hand(response, truth, expected):
    assert hendrycks_math.score(response, truth) == expected


@pytest.mark.parametrize("response, truth, expected", [
    ("Answer: $1,000$ dollars", "1000", {"score": 1.0, "acc": True, "pred": "1000"}),
    ("Answer: 1000001", "1000000", {"score": -1.0, "acc": False, "pred": "1000001"}),
    ("Answer: [INVALID]\n\\boxed{7}", "7", {"score": 1.0, "acc": True, "pred": "7"}),  # box fallback
    ("\\boxed{7} \\boxed 9", "7", {"score": 1.0, "acc": True, "pred": "7"}),  # '\boxed 9' is no box here
    ("\\fbox{7}", "7", {"score": -1.0, "acc": False, "pred": "[INVALID]"}),
    ("\\boxed{ 7}", "7", {"score": -1.0, "acc": False, "pred": " 7"}),  # the box is compared as written
])
def test_math_dapo_by_hand(response, truth, expected):
    assert math_dapo.score(response, truth) == expected


@pytest.mark.parametrize("response, targets, expected", [
    ("<answer> The Beatles! </answer>", ["Beatles"], 1.0),  # punctuation, case and articles normalized away
    ("<answer>Paris</answer>" * 11, ["Paris"], 0.25),  # more than 10 tags: a quarter
    ("<answer>Paris France</answer>", ["Paris"], 0.0),  # exact match, not substring
    ("Paris", ["Paris"], 0.0),  # no tag
])
def test_search_r1_by_hand(response, targets, expected):
    assert search_r1.score(response, {"target": targets}) == expected
