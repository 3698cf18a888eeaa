"""Rule rewards, user python functions, the manager (samples, combination, metrics, errors)."""

from pathlib import Path

import pytest
import torch

from verl.batch import Batch
from verl.config import ConfigError, RewardFnConfig, build_section
from verl.rewards import RewardError, RewardManager, build_reward_manager
from verl.rewards.rule import keyword_fraction, length_score, string_similarity


def make_batch(responses, prompts=None, **kw):
    n = len(responses)
    return Batch(prompt_text=prompts or [f"prompt {i}" for i in range(n)], response_text=list(responses),
                 response_mask=kw.pop("response_mask", torch.ones(n, 4)), **kw)


def score(cfg, responses, **kw):
    return build_reward_manager(cfg).score(make_batch(responses, **kw))


# ----------------------------------------------------------------------------- rule scorers
def test_string_match_hand_values():
    assert string_similarity("I love reinforcement learning", "I love reinforcement learning") == 1.0
    assert string_similarity("  I love reinforcement learning\n", "I love reinforcement learning") == 1.0
    # matching blocks 'abc' (3 chars): 2*3 / (4+4)
    assert string_similarity("abcx", "abcd") == pytest.approx(0.75)
    assert string_similarity("", "abcd") == 0.0
    assert string_similarity("zzzz", "abcd") == 0.0
    target = "I love reinforcement learning"
    far, near = string_similarity("Hello world", target), string_similarity("I love learning", target)
    assert 0 < far < near < 1


def test_keyword_and_length_hand_values():
    assert keyword_fraction("I LOVE learning", ["love", "RL", "Learning"]) == pytest.approx(2 / 3)
    assert keyword_fraction("nothing here", ["a1", "b2"]) == 0.0
    assert length_score("x" * 10, 10) == 1.0
    assert length_score("x" * 5, 10) == 0.5
    assert length_score("x" * 15, 10) == 0.5
    assert length_score("x" * 25, 10) == 0.0
    assert length_score("  " + "x" * 10 + "\n", 10) == 1.0  # stripped


def test_manager_scores_rules_with_weight():
    scores, metrics = score(RewardFnConfig(type="keyword", keywords=["love", "learning"], weight=2.0),
                            ["I love it", "learning to love", "no"])
    assert scores.dtype == torch.float32 and scores.shape == (3,)
    assert scores.tolist() == pytest.approx([1.0, 2.0, 0.0])
    assert metrics["reward/keyword"] == pytest.approx(0.5)  # unweighted mean of the component
    assert metrics["reward/errors"] == 0.0
    scores, _ = score(RewardFnConfig(type="length_penalty", target_length=4), ["abcd", "ab"])
    assert scores.tolist() == pytest.approx([1.0, 0.5])
    scores, _ = score(RewardFnConfig(type="string_match", target="abcd"), ["abcd", "abcx"])
    assert scores.tolist() == pytest.approx([1.0, 0.75])


def test_bad_rule_config_is_a_config_error():
    with pytest.raises(ConfigError, match="keywords"):
        build_reward_manager(RewardFnConfig(type="keyword"))
    with pytest.raises(ConfigError, match="target_length"):
        build_reward_manager(RewardFnConfig(type="length_penalty", target_length=0))
    with pytest.raises(ConfigError, match="reward_fn.type"):
        build_reward_manager(RewardFnConfig(type="nope"))


# ----------------------------------------------------------------------------- samples
def test_samples_built_from_batch(tmp_path):
    path = tmp_path / "capture.py"
    path.write_text("SEEN = []\ndef fn(prompts, responses, samples):\n    SEEN.append((prompts, responses, samples))\n"
                    "    return [0.0] * len(responses)\n")
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 1]], dtype=torch.float32)  # interior zero: tool output
    batch = Batch(prompt_text=["p0", "p1"], response_text=["r0", "r1"], response_mask=mask,
                  data_source=["gsm8k", "math"], truncated=[False, True], extra=[{"a": 1}, {}])
    manager = RewardManager(RewardFnConfig(type="python", function=f"{path}:fn"), max_response_length=16)
    manager.score(batch)
    seen = manager.components[0].fn.__globals__["SEEN"]
    prompts, responses, samples = seen[-1]
    assert prompts == ["p0", "p1"] and responses == ["r0", "r1"]
    assert samples[0] == dict(ground_truth=None, data_source="gsm8k", extra={"a": 1}, response_length=2,
                              max_response_length=16, truncated=False)
    assert samples[1]["response_length"] == 3 and samples[1]["truncated"] is True
    # without max_response_length the padded width R is used
    RewardManager(RewardFnConfig(type="python", function=f"{path}:fn")).score(batch)
    assert seen[-1][2][0]["max_response_length"] == 4


# ----------------------------------------------------------------------------- python functions
def test_python_function_loaded_once_and_called_on_batch(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text("LOADS = []\nLOADS.append(1)\n"
                    "def by_length(prompts, responses, samples):\n"
                    "    return [len(r) + s['response_length'] for r, s in zip(responses, samples)]\n")
    cfg = RewardFnConfig(type="python", function=f"{path}:by_length")
    m1, m2 = build_reward_manager(cfg), build_reward_manager(cfg)
    assert m1.components[0].fn is m2.components[0].fn
    assert m1.components[0].fn.__globals__["LOADS"] == [1]
    scores, metrics = m1.score(make_batch(["ab", "abcd"]))
    assert scores.tolist() == [6.0, 8.0] and metrics["reward/python"] == 7.0


def test_python_function_missing_file_or_function(tmp_path):
    with pytest.raises(ConfigError, match=r"file '.*nowhere\.py' not found"):
        build_reward_manager(RewardFnConfig(type="python", function=str(tmp_path / "nowhere.py") + ":f"))
    path = tmp_path / "has_other.py"
    path.write_text("def other(p, r, s):\n    return [0.0] * len(r)\n")
    with pytest.raises(ConfigError, match=r"has_other\.py' has no function 'missing' \(callables defined there: other\)"):
        build_reward_manager(RewardFnConfig(type="python", function=f"{path}:missing"))


def test_example_reward_function_runs():
    example = Path(__file__).resolve().parents[2] / "examples" / "reward_fn_example.py"
    cfg = RewardFnConfig(type="python", function=f"{example}:polite_and_brief")
    batch = make_batch(["Thank you!", "no"], response_mask=torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1]]),
                       truncated=[False, True])
    scores, _ = RewardManager(cfg, max_response_length=4).score(batch)
    assert scores.tolist() == pytest.approx([1 - 0.5, -1.0 - 1.0])


# ----------------------------------------------------------------------------- combined
def test_combined_weights_and_component_metrics():
    cfg = build_section(RewardFnConfig, {
        "type": "combined",
        "components": [
            {"type": "keyword", "keywords": ["love"], "weight": 0.5},
            {"type": "keyword", "keywords": ["hate"], "weight": -1.0},
            {"type": "length_penalty", "target_length": 4, "weight": 2.0, "name": "len"},
        ]}, "reward_fn")
    assert isinstance(cfg.components[0], RewardFnConfig)
    manager = build_reward_manager(cfg)
    assert [c.name for c in manager.components] == ["keyword", "keyword_2", "len"]
    scores, metrics = manager.score(make_batch(["love", "hate", "love hate"]))
    # love: 0.5*1 - 0 + 2*1; hate: 0 - 1 + 2*1; 'love hate' (9 chars): 0.5 - 1 + 2*max(0, 1-5/4)=0
    assert scores.tolist() == pytest.approx([2.5, 1.0, -0.5])
    assert metrics == pytest.approx({"reward/keyword": 2 / 3, "reward/keyword_2": 2 / 3, "reward/len": 2 / 3,
                                     "reward/errors": 0.0})


# ----------------------------------------------------------------------------- error policies
BAD_FUNCS = '''
import math
def raises_on_bad(prompts, responses, samples):
    out = []
    for r in responses:
        if "bad" in r:
            raise ValueError("cannot score " + r)
        out.append(1.0)
    return out
def nan_on_bad(prompts, responses, samples):
    return [math.nan if "bad" in r else 1.0 for r in responses]
def none_on_bad(prompts, responses, samples):
    return [None if "bad" in r else 1.0 for r in responses]
def str_on_bad(prompts, responses, samples):
    return ["oops" if "bad" in r else 1.0 for r in responses]
def wrong_length(prompts, responses, samples):
    return [1.0] * (len(responses) + 1)
def tensor_scores(prompts, responses, samples):
    import torch
    return torch.ones(len(responses))
'''


@pytest.fixture
def bad_file(tmp_path):
    path = tmp_path / "bad_rewards.py"
    path.write_text(BAD_FUNCS)
    return path


@pytest.mark.parametrize("func", ["raises_on_bad", "nan_on_bad", "none_on_bad", "str_on_bad"])
def test_zero_policy_scores_and_counts_bad_samples(bad_file, func):
    cfg = RewardFnConfig(type="python", function=f"{bad_file}:{func}", on_error="zero")
    scores, metrics = build_reward_manager(cfg).score(make_batch(["good", "bad one", "good", "bad two"]))
    assert scores.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert metrics["reward/errors"] == 2.0
    assert metrics["reward/python"] == 0.5


@pytest.mark.parametrize("func,why", [("raises_on_bad", "ValueError: cannot score bad"), ("nan_on_bad", "nan"),
                                      ("none_on_bad", "None"), ("str_on_bad", "oops")])
def test_fail_policy_names_function_and_sample(bad_file, func, why):
    cfg = RewardFnConfig(type="python", function=f"{bad_file}:{func}", on_error="fail")
    long_prompt = "Q" * 300 + "\nsecond line"
    with pytest.raises(RewardError) as info:
        build_reward_manager(cfg).score(make_batch(["good", "bad " + "x" * 200], prompts=["p", long_prompt]))
    message = str(info.value)
    assert "\n" not in message
    assert f"bad_rewards.py:{func}" in message and "sample 1" in message
    assert "Q" * 70 in message and "Q" * 100 not in message  # prompt shown, truncated to ~80 chars
    assert why in message


def test_wrong_length_is_an_error_for_every_sample(bad_file):
    cfg = RewardFnConfig(type="python", function=f"{bad_file}:wrong_length", on_error="zero")
    scores, metrics = build_reward_manager(cfg).score(make_batch(["a", "b", "c"]))
    assert scores.tolist() == [0.0, 0.0, 0.0] and metrics["reward/errors"] == 3.0
    with pytest.raises(RewardError, match="returned 4 scores for a batch of 3 samples"):
        build_reward_manager(cfg.__class__(type="python", function=cfg.function)).score(make_batch(["a", "b", "c"]))


def test_tensor_output_accepted(bad_file):
    cfg = RewardFnConfig(type="python", function=f"{bad_file}:tensor_scores")
    scores, metrics = build_reward_manager(cfg).score(make_batch(["a", "b"]))
    assert scores.tolist() == [1.0, 1.0] and metrics["reward/errors"] == 0.0


def test_combined_errors_counted_once_per_sample_and_parent_zero_applies(bad_file):
    cfg = RewardFnConfig(type="combined", on_error="zero", components=[
        RewardFnConfig(type="python", function=f"{bad_file}:raises_on_bad"),
        RewardFnConfig(type="python", function=f"{bad_file}:nan_on_bad", weight=2.0),
    ])
    scores, metrics = build_reward_manager(cfg).score(make_batch(["good", "bad"]))
    assert scores.tolist() == [3.0, 0.0]
    assert metrics["reward/errors"] == 1.0
    assert metrics["reward/python"] == 0.5 and metrics["reward/python_2"] == 0.5


def test_empty_batch():
    scores, metrics = build_reward_manager(RewardFnConfig()).score(Batch())
    assert scores.shape == (0,) and metrics["reward/errors"] == 0.0
