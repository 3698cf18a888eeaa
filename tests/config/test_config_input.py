"""Bad config input is refused at load time with the key, file or line named (issue: nothing
silent): NaN/inf in any float key, integers that cannot fit, duplicate YAML keys, unreadable
files, non-string list items, mistyped choices; and relative paths inside a config file."""

from __future__ import annotations

import dataclasses
import os
import types
import typing

import pytest

from verl.config import Config, ConfigError, load_config, read_yaml


def _float_keys(cls=Config, prefix=""):
    """Every float (or Optional[float]) key of the schema, as a dotted path: new keys are
    covered by the NaN/inf test below without editing it."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):  # Optional[X] -> X
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            yield from _float_keys(tp, path + ".")
        elif tp is float:
            yield path


FLOAT_KEYS = sorted(_float_keys())


def test_schema_has_float_keys():
    # The walk finds the keys the issue names (so the parametrised test below is not empty).
    assert {"algorithm.kl_coef", "training.grad_clip", "training.lr", "rollout.temperature"} <= set(FLOAT_KEYS)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "nan", "inf"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_every_float_key_rejects_nan_and_infinity(key, value):
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', r'[.]')}: must be a finite number"):
        load_config(None, [f"{key}={value}"])


def test_float_key_in_a_reward_component_rejects_nan(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward_fn:\n  type: combined\n  components:\n    - {type: string_match, weight: .nan}\n")
    with pytest.raises(ConfigError, match=r"reward_fn.components\[0\].weight: must be a finite number"):
        load_config(str(cfg))


@pytest.mark.parametrize("override, key", [
    ("training.batch_size=100000000000000000000", "training.batch_size"),  # > int64
    ("training.batch_size=10000000", "training.batch_size"),  # fits int64, not memory: 1e7 x 1 sequences
    ("rollout.max_new_tokens=99999999", "rollout.max_new_tokens"),
    ("data.max_prompt_length=99999999", "data.max_prompt_length"),
    ("seed=99999999999999999999", "seed"),  # torch: "Overflow when unpacking long long"
    ("seed=4294967296", "seed"),  # 2^32: beyond numpy's seed range
    ("seed=-1", "seed"),
])
def test_values_that_cannot_fit_are_refused(override, key):
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', r'[.]')}: "):
        load_config(None, [override])


def test_largest_seed_is_accepted():
    assert load_config(None, ["seed=4294967295"]).seed == 2 ** 32 - 1


def test_duplicate_key_names_both_lines(tmp_path):
    cfg = tmp_path / "dup.yaml"
    cfg.write_text("training:\n  total_steps: 2\n  lr: 1.0e-5\n  total_steps: 1\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: key 'total_steps' appears twice .*lines 2 and 4"):
        read_yaml(str(cfg))


def test_duplicate_section_names_both_lines(tmp_path):
    cfg = tmp_path / "dup.yaml"
    cfg.write_text("training:\n  total_steps: 2\nmodel:\n  name: tiny:gpt2\ntraining:\n  lr: 1.0e-5\n")
    with pytest.raises(ConfigError, match=r"key 'training' appears twice .*lines 1 and 5"):
        load_config(str(cfg))


def test_duplicate_key_in_an_override_value():
    with pytest.raises(ConfigError, match=r"appears twice"):
        load_config(None, ["reward_fn={type: keyword, type: string_match}"])


def test_non_utf8_config_names_file_and_line(tmp_path):
    cfg = tmp_path / "latin1.yaml"
    cfg.write_bytes(b"training:\n  total_steps: 2\ndata:\n  system_prompt: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin1.yaml: line 4 is not UTF-8"):
        load_config(str(cfg))


def test_config_path_that_is_a_folder(tmp_path):
    with pytest.raises(ConfigError, match=r"is a folder, not a config file"):
        load_config(str(tmp_path))


def test_stop_strings_must_be_strings():
    with pytest.raises(ConfigError, match=r"rollout.stop\[0\]: expected a string, got 1 \(quote it: '1'\)"):
        load_config(None, ["rollout.stop=[1, 2]"])
    assert load_config(None, ["rollout.stop=['1', '2']"]).rollout.stop == ["1", "2"]


@pytest.mark.parametrize("override, hint", [
    ("reward_fn.type=strng_match", "did you mean 'string_match'"),
    ("algorithm.name=grp", "did you mean 'grpo'"),
    ("reward_fn.on_error=zer", "did you mean 'zero'"),
    ("training.lr_scheduler=cosin", "did you mean 'cosine'"),
    ("rollout.name=vlm", "did you mean 'vllm'"),
])
def test_did_you_mean_for_choices(override, hint):
    with pytest.raises(ConfigError, match=hint):
        load_config(None, [override])


def test_malformed_override_value_is_a_config_error():
    with pytest.raises(ConfigError, match=r"override 'rollout.stop=\[a': the value is not valid YAML"):
        load_config(None, ["rollout.stop=[a"])


def test_cli_exit_code_2_and_one_line(tmp_path, capsys):
    from verl.cli import main

    assert main(["train", "training.grad_clip=.nan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: training.grad_clip: must be a finite number, got nan"]


# ------------------------------------------------------------------ relative paths


def _write_recipe(folder, data_line="train_files: [data/train.jsonl]"):
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "train.jsonl").write_text('{"prompt": "What is 1+1?", "answer": "2"}\n')
    (folder / "rewards.py").write_text("def score(prompts, responses, samples):\n    return [0.0] * len(responses)\n")
    cfg = folder / "recipe.yaml"
    cfg.write_text(f"data:\n  {data_line}\nreward_fn:\n  type: python\n  function: rewards.py:score\n")
    return cfg


def test_relative_paths_in_a_config_file_resolve_against_its_folder(tmp_path, monkeypatch):
    cfg = _write_recipe(tmp_path / "recipes")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_config(str(cfg))
    assert loaded.data.train_files == [str(tmp_path / "recipes" / "data" / "train.jsonl")]
    assert loaded.reward_fn.function == f"{tmp_path / 'recipes' / 'rewards.py'}:score"
    assert os.path.isfile(loaded.data.train_files[0])


def test_working_directory_is_the_fallback(tmp_path, monkeypatch):
    # The file is not beside the config but under the working directory: that is what was meant.
    cfg_dir = tmp_path / "configs"
    cfg_dir.mkdir()
    cfg = cfg_dir / "recipe.yaml"
    cfg.write_text("data:\n  train_files: [mine/train.jsonl]\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.jsonl").write_text('{"prompt": "hi"}\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(str(cfg)).data.train_files == ["mine/train.jsonl"]


def test_overrides_and_hub_names_are_not_rewritten(tmp_path, monkeypatch):
    cfg = _write_recipe(tmp_path / "recipes")
    monkeypatch.chdir(tmp_path)
    loaded = load_config(str(cfg), ["data.val_files=[data/train.jsonl]", "model.name=Qwen/Qwen2-0.5B"])
    assert loaded.data.val_files == ["data/train.jsonl"]  # an override is relative to the working directory
    assert loaded.model.name == "Qwen/Qwen2-0.5B"


def test_examples_run_from_another_folder(tmp_path, monkeypatch):
    """The shipped recipes name their data relative to examples/, so they load from anywhere."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.chdir(tmp_path)
    for name in ("arithmetic_grpo.yaml", "arithmetic_ppo.yaml", "arithmetic_grpo_cpu.yaml", "quickstart.yaml"):
        loaded = load_config(os.path.join(root, "examples", name))
        for path in loaded.data.train_files + loaded.data.val_files:
            assert os.path.isfile(path), (name, path)
