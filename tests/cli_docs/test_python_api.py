"""The short Python API: verl.Trainer(model=, reward_funcs=, train_dataset=, ...), reward callables in
TRL's and verl's signatures, in-memory datasets, and the saved config.yaml reloading."""

import hashlib
import json
import os
import re
import runpy
import sys

import datasets
import pytest
import torch

import verl
from verl.batch import Batch
from verl.config import ConfigError, load_config
from verl.data.in_memory import resolve_dataset
from verl.data.sources import DataError
from verl.rewards import RewardError, build_reward_manager
from verl.rewards.callables import reward_components, signature_style
from verl.trainer.inputs import attach_inputs
from verl.checkpoint.resume import config_differences

SMALL = dict(training={"total_steps": 1, "batch_size": 2, "micro_batch_size": 2},
             rollout={"n": 2, "max_new_tokens": 8}, logging={"backends": ["jsonl"], "progress_bar": False},
             device="cpu")
RECORDS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1), "level": i % 3} for i in range(6)]


# Module-level rewards: the saved config names them as "test_python_api:<name>", and a reloaded
# config finds them again by that name.
def answer_value(completions, prompts, answer, **kwargs):
    """TRL signature, reading the dataset's `answer` column: the answer as a number."""
    answer_value.calls.append((list(prompts), list(answer), dict(kwargs)))
    return [float(a) for a in answer]


answer_value.calls = []


def token_count(prompts, responses, samples):
    """verl signature: response length in tokens."""
    return [float(s["response_length"]) for s in samples]


def make_scaled_length(scale):
    def scaled_length(completions, **kwargs):  # a closure: `scale` lives in the cell, not the config
        return [scale * len(c) for c in completions]
    return scaled_length


def _mean(values):
    return sum(values) / len(values)


def _step_samples(trainer):
    """(last batch, response lengths in characters, in tokens): to recompute each reward by hand."""
    b = trainer.run.last_batch
    chars = [float(len(r)) for r in b.response_text]
    tokens = b.attention_mask[:, b.prompt_length:].sum(dim=1).float().tolist()  # (B,) response tokens
    return b, chars, tokens


def test_trainer_kwargs_dataset_lambda_closure_trl_and_verl_signatures(tmp_path):
    answer_value.calls.clear()
    ds = datasets.Dataset.from_list(RECORDS)
    weights = [1.0, 1.0, 0.5, 2.0]
    trainer = verl.Trainer(
        model="tiny:gpt2", algorithm="grpo", train_dataset=ds,
        reward_funcs=[lambda completions, **kw: [float(len(c)) for c in completions], make_scaled_length(3.0),
                      answer_value, token_count],
        reward_weights=weights, checkpoint={"save_dir": str(tmp_path / "run")}, **SMALL)
    assert isinstance(trainer, verl.trainer.trainer.Trainer)
    metrics = trainer.train()
    b, chars, tokens = _step_samples(trainer)
    assert len(b) == 4  # batch 2 x rollout.n 2

    # Python float sums over the same values in the same order: equal up to float64 rounding.
    assert metrics["reward/reward_0"] == pytest.approx(_mean(chars), rel=1e-12)
    assert metrics["reward/scaled_length"] == pytest.approx(3.0 * _mean(chars), rel=1e-12)
    assert metrics["reward/token_count"] == pytest.approx(_mean(tokens), rel=1e-12)
    truth = {r["prompt"]: r["answer"] for r in RECORDS}
    (prompts, answers, extra_columns), = answer_value.calls
    assert [truth[p] for p in prompts] == answers  # each sample got its own row's answer column
    assert extra_columns["level"] == [next(r["level"] for r in RECORDS if r["prompt"] == p) for p in prompts]
    assert metrics["reward/answer_value"] == pytest.approx(_mean([float(a) for a in answers]), rel=1e-12)
    # reward/mean: the weighted sum as a float32 tensor mean (a few hundred at most; float32 keeps ~7
    # significant digits, so a 4-sample sum and mean stay within ~1e-7 relative of the float64 value)
    expected = sum(w * metrics[f"reward/{n}"] for w, n in zip(weights, ("reward_0", "scaled_length",
                                                                      "answer_value", "token_count")))
    assert metrics["reward/mean"] == pytest.approx(expected, rel=1e-6)

    # The saved config.yaml reloads, names each callable and describes the dataset.
    saved_path = tmp_path / "run" / "config.yaml"
    saved = load_config(str(saved_path))
    functions = {c.name: c.function for c in saved.reward_fn.components}
    assert functions["reward_0"].endswith(
        ":test_trainer_kwargs_dataset_lambda_closure_trl_and_verl_signatures.<locals>.<lambda>")
    assert functions["scaled_length"].endswith(":make_scaled_length.<locals>.scaled_length")
    assert functions["answer_value"] == f"{__name__}:answer_value"
    assert [c.weight for c in saved.reward_fn.components] == weights
    assert saved.data.train_files == []
    digest = hashlib.sha256(b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in RECORDS)).hexdigest()
    assert saved.data.train_source == (f"datasets.Dataset rows=6 fingerprint={ds._fingerprint} sha256={digest[:16]} "
                                       "columns=prompt,answer,level")
    # Without the objects the saved config cannot train: one clear error, before any model loads.
    with pytest.raises(ConfigError, match=r"reward_fn\.components\[0\]\.function: .*lambda"):
        verl.create_trainer(saved)
    # Given the objects again it is the same run, as resume compares configs (a lambda of the same
    # function has the same qualified name; what a closure captured is not recorded).
    again, _ = attach_inputs(saved, reward_funcs=[lambda completions, **kw: [float(len(c)) for c in completions],
                                                  make_scaled_length(3.0), answer_value, token_count],
                             reward_weights=weights, train_dataset=ds)
    assert config_differences(saved.to_dict(), again.to_dict()) == []


def test_create_trainer_list_of_dicts_and_reloaded_config_scores_the_same(tmp_path):
    cfg = load_config(None, [f"checkpoint.save_dir={tmp_path / 'run'}", "algorithm.name=grpo", "rollout.n=2",
                             "training.total_steps=1", "training.batch_size=2", "training.micro_batch_size=2",
                             "rollout.max_new_tokens=8", "logging.backends=[jsonl]", "logging.progress_bar=false",
                             "device=cpu"])
    before = cfg.to_dict()
    evals = [{"prompt": "What is 9 + 1?", "answer": "10"}, {"prompt": "What is 9 + 2?", "answer": "11"}]
    trainer = verl.create_trainer(cfg, reward_funcs=[answer_value, token_count, token_count, "format"],
                                  train_dataset=RECORDS, eval_dataset=evals)
    assert cfg.to_dict() == before  # the caller's Config is not modified
    assert [r.prompt for r in trainer.val_rows] == [e["prompt"] for e in evals]
    metrics = trainer.step()
    b, _, tokens = _step_samples(trainer)
    assert metrics["reward/token_count"] == metrics["reward/token_count_2"] == pytest.approx(_mean(tokens), rel=1e-12)
    assert metrics["reward/answer_value"] == pytest.approx(_mean([float(g) for g in b.ground_truth]), rel=1e-12)
    assert "reward/format" in metrics
    trainer.run.tracker.close()

    saved = load_config(str(tmp_path / "run" / "config.yaml"))
    # The same rows as the Dataset of the test above: the same content digest
    assert re.fullmatch(r"list of 6 dicts sha256=[0-9a-f]{16} columns=prompt,answer,level", saved.data.train_source)
    assert saved.data.train_source.split()[4] == resolve_dataset(datasets.Dataset.from_list(RECORDS), saved.data,
                                                                 "x")[2].split()[3]
    assert saved.data.val_source.startswith("list of 2 dicts sha256=")
    # Module-level functions are found again by their recorded names: the same scores.
    scores, reloaded = build_reward_manager(saved.reward_fn, saved.rollout.max_new_tokens).score(b)
    assert torch.equal(scores, b.scores)  # same functions, same samples, same float32 sum order
    for key in ("reward/answer_value", "reward/token_count", "reward/token_count_2", "reward/format"):
        assert reloaded[key] == metrics[key]


# ----------------------------------------------------------------------------- reward callables


def _batch(responses, extra=None):
    n = len(responses)
    return Batch(prompt_text=[f"p{i}" for i in range(n)], response_text=list(responses),
                 response_mask=torch.ones(n, 4), ground_truth=[str(i) for i in range(n)],
                 data_source=["d"] * n, extra=extra or [{} for _ in range(n)])


def _manager(reward_funcs, *overrides, **kw):
    cfg, inputs = attach_inputs(load_config(None, list(overrides)), reward_funcs=reward_funcs, **kw)
    return build_reward_manager(cfg.reward_fn, functions=inputs.functions)


def test_a_raising_callable_is_a_reward_error_naming_it_and_zero_counts_it():
    def broken(completions, **kwargs):
        raise ValueError("boom")

    fine = lambda prompts, responses, samples: [1.0] * len(responses)  # noqa: E731
    with pytest.raises(RewardError, match=r"reward 'broken' = python \(.*broken\) failed on sample 0 of 2 "
                                          r"\(prompt='p0', response='a'\): raised ValueError: boom"):
        _manager([fine, broken]).score(_batch(["a", "b"]))
    scores, metrics = _manager([fine, broken], "reward_fn.on_error=zero").score(_batch(["a", "b"]))
    assert scores.tolist() == [1.0, 1.0] and metrics["reward/errors"] == 2.0 and metrics["reward/broken"] == 0.0


def test_trl_columns_named_or_missing():
    def named_only(completions, ground_truth, level):  # no **kwargs: only what it names is passed
        return [float(g) + lv for g, lv in zip(ground_truth, level)]

    extra = [{"level": 10}, {"level": 20}]
    scores, _ = _manager([named_only]).score(_batch(["a", "b"], extra))
    assert scores.tolist() == [10.0, 21.0]

    def needs_solution(completions, solution):
        return [0.0] * len(completions)

    with pytest.raises(RewardError, match=r"needs the column\(s\) solution; the data has: completions, data_source, "
                                          r"ground_truth, prompts"):
        _manager([needs_solution], "reward_fn.on_error=zero").score(_batch(["a"]))


def test_signature_rule_and_names():
    assert signature_style(lambda completions, **kw: [], "f") == "trl"
    assert signature_style(lambda prompts, completions: [], "f") == "trl"
    assert signature_style(lambda p, r, s: [], "f") == "verl"
    with pytest.raises(ConfigError, match=r"reward_funcs\[0\]: cannot tell how to call <lambda>\(x\); .*TRL.*verl"):
        reward_components([lambda x: x])
    sections, live = reward_components([lambda completions: [], lambda completions: [], token_count, token_count,
                                        ("mine", token_count), "gsm8k", {"type": "keyword", "keywords": ["a"]},
                                        {"name": "d", "function": token_count, "weight": 3}])
    assert [s["name"] for s in sections] == ["reward_0", "reward_1", "token_count", "token_count_2", "mine",
                                             "gsm8k", "keyword", "d"]
    assert set(live) == {"reward_0", "reward_1", "token_count", "token_count_2", "mine", "d"}
    assert sections[-1] == {"name": "d", "weight": 3, "type": "python", "function": f"{__name__}:token_count"}
    with pytest.raises(ConfigError, match=r"reward_funcs\[0\]: the name 'mean' would overwrite the metric reward/mean"):
        reward_components([("mean", token_count)])
    with pytest.raises(ConfigError, match=r"reward_weights: needs one weight per reward function \(2\)"):
        reward_components([token_count, token_count], [1.0])
    with pytest.raises(ConfigError, match=r"reward_funcs\[0\]: 'nope' is neither a reward type"):
        reward_components(["nope"])


def test_a_yaml_python_reward_may_have_the_trl_signature(tmp_path):
    path = tmp_path / "trl_reward.py"
    path.write_text("def by_len(completions, **kw):\n    return [float(len(c)) for c in completions]\n")
    cfg = load_config(None, ["reward_fn.type=python", f"reward_fn.function={path}:by_len"])
    scores, _ = build_reward_manager(cfg.reward_fn).score(_batch(["ab", "abcd"]))
    assert scores.tolist() == [2.0, 4.0]


# ----------------------------------------------------------------------------- config and data


def test_make_config_keywords(tmp_path):
    from verl.api import make_config

    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text("training:\n  lr: 0.5\n  total_steps: 7\n")
    cfg = make_config(str(yaml_path), model="tiny:llama", algorithm="grpo", training={"lr": 1e-4},
                      overrides={"rollout.n": 3, "data.max_prompt_length": 64}, seed=5)
    assert (cfg.model.name, cfg.algorithm.name, cfg.training.lr, cfg.training.total_steps) == ("tiny:llama", "grpo",
                                                                                              1e-4, 7)
    assert (cfg.rollout.n, cfg.data.max_prompt_length, cfg.seed) == (3, 64, 5)
    assert make_config(overrides=["training.lr=2e-5"]).training.lr == 2e-5
    with pytest.raises(ConfigError, match=r"training\.lr: set twice \(training= and overrides\['training\.lr'\]\)"):
        make_config(training={"lr": 1e-4}, overrides={"training.lr": 1e-5})
    with pytest.raises(ConfigError, match=r"unknown config key 'trainng'; did you mean 'training'\?"):
        make_config(trainng={"lr": 1e-4})
    with pytest.raises(ConfigError, match=r"unknown config key 'training\.lrr'"):
        make_config(overrides={"training.lrr": 1})


def test_dataset_forms(tmp_path):
    data_cfg = load_config(None).data
    path = tmp_path / "t.jsonl"
    assert resolve_dataset(path, data_cfg, "train_dataset") == ([str(path)], None, None)
    assert resolve_dataset([str(path), path], data_cfg, "train_dataset")[0] == [str(path)] * 2
    paths, rows, text = resolve_dataset(RECORDS[:2], data_cfg, "train_dataset")
    assert paths == [] and [r.ground_truth for r in rows] == ["1", "2"]
    assert rows[1].extra == {"answer": "2", "level": 1}  # the other columns, for the reward functions
    changed = resolve_dataset([dict(RECORDS[0], answer="9"), RECORDS[1]], data_cfg, "train_dataset")[2]
    assert text.startswith("list of 2 dicts sha256=") and changed.startswith("list of 2 dicts sha256=")
    assert text != changed  # one changed value changes the digest
    with pytest.raises(DataError, match=r"train_dataset\[1\]: a list must hold only dicts .* got str"):
        resolve_dataset([RECORDS[0], "x.jsonl"], data_cfg, "train_dataset")
    with pytest.raises(DataError, match=r"train_dataset: a DatasetDict with splits \['train'\]; pass one split"):
        resolve_dataset(datasets.DatasetDict({"train": datasets.Dataset.from_list(RECORDS)}), data_cfg, "train_dataset")
    with pytest.raises(DataError, match=r"eval_dataset row 0: no 'prompt' key"):
        resolve_dataset([{"question": "q"}], data_cfg, "eval_dataset")
    # A path goes to data.train_files, read there as usual; nothing in-memory is recorded.
    cfg, inputs = attach_inputs(load_config(None), train_dataset=str(path))
    assert cfg.data.train_files == [str(path)] and cfg.data.train_source is None and inputs.train_rows is None


def test_objects_put_into_a_config_by_hand_get_one_clear_error():
    cfg = load_config(None)
    cfg.reward_fn.function = token_count
    with pytest.raises(ConfigError, match=r"reward_fn\.function: holds a Python callable; pass it as reward_funcs"):
        verl.create_trainer(cfg)
    cfg = load_config(None)
    cfg.data.train_files = [datasets.Dataset.from_list(RECORDS)]
    with pytest.raises(ConfigError, match=r"data\.train_files\[0\]: holds a Dataset; pass in-memory data as "
                                          r"train_dataset="):
        verl.create_trainer(cfg)


def test_example_script_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["python_api.py", "--steps", "1", "--save_dir", str(tmp_path / "ex")])
    runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python_api.py"), run_name="__main__")
    saved = load_config(str(tmp_path / "ex" / "config.yaml"))
    assert [c.function for c in saved.reward_fn.components] == ["__main__:correct_answer", "__main__:brevity"]
