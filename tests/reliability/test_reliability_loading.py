"""Fast, helpful failures at load time: one line naming the key or file, exit 2, in seconds --
a hub name with no hub, prompt + response lengths beyond the model's positions, a data file that
is not UTF-8, a broken file in a model folder, a model whose own code its role may not run; and
WandB logging offline unless an API key is configured (docs/reliability.md, "Load-time errors")."""

import json
import os
import re
import shutil
import socket
import time

import pytest
import torch

from conftest import small_overrides
from verl.cli import main
from verl.config import ConfigError, load_config

# ---------------------------------------------------------------------------
# Hub names without a hub
# ---------------------------------------------------------------------------


@pytest.fixture
def fresh_hub_decisions(monkeypatch):
    import verl.models.hub as hub

    monkeypatch.setattr(hub, "_DECIDED", {})
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-verl-test-cache")  # nothing cached
    return hub


def _assert_ways_out(message: str, name: str, key: str) -> None:
    assert "\n" not in message and message.startswith(f"{key}: '{name}'")
    assert "local model folder" in message and "verl models fetch" in message and "tiny:gpt2" in message


def test_hub_name_offline_fails_at_once_with_the_ways_out(fresh_hub_decisions, monkeypatch):
    from verl.models.loading import ModelLoadError, load_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelLoadError) as info:
        load_tokenizer("gpt2", "model.name")
    assert time.monotonic() - start < 5.0
    _assert_ways_out(str(info.value), "gpt2", "model.name")
    assert "HF_HUB_OFFLINE=1" in str(info.value)


def test_hub_name_fails_within_5s_when_the_network_hangs(fresh_hub_decisions, monkeypatch):
    """A hub endpoint that accepts the connection and never answers (a hanging proxy or firewall)."""
    from verl.models.loading import ModelLoadError, load_tokenizer

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the kernel's backlog; nobody ever replies
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # huggingface_hub read the variable at import
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    try:
        start = time.monotonic()
        with pytest.raises(ModelLoadError) as info:
            load_tokenizer("openai-community/gpt2", "critic.name")
        elapsed = time.monotonic() - start
    finally:
        silent.close()
    assert fresh_hub_decisions.PROBE_TIMEOUT_S <= elapsed < 5.0, elapsed  # it did wait for the hub, briefly
    _assert_ways_out(str(info.value), "openai-community/gpt2", "critic.name")
    # the client's read timeout, or the join's bound just after it, whichever comes first
    assert re.search(r"and (no answer from http://127\.0\.0\.1:\d+ within 3s|http://127\.0\.0\.1:\d+ cannot be "
                     r"reached: )", str(info.value)), str(info.value)


def test_cli_hub_name_is_one_line_exit_2_in_seconds(fresh_hub_decisions, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    code = main(["train", *small_overrides(tmp_path, **{"model.name": "gpt2"})])
    assert time.monotonic() - start < 5.0
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    _assert_ways_out(err[len("error: "):], "gpt2", "model.name")


# ---------------------------------------------------------------------------
# Lengths beyond the model's positions
# ---------------------------------------------------------------------------


def test_context_length_is_checked_before_any_weights_load(tiny_gpt2, tmp_path, capsys):
    from verl.models.loading import check_context_length

    # tiny:gpt2 has n_positions = 512 (verl/models/tiny.py)
    check_context_length(load_config(None, ["model.name=tiny:gpt2", "data.max_prompt_length=480",
                                            "rollout.max_new_tokens=32"]))  # 512: fits exactly
    with pytest.raises(ConfigError) as info:
        check_context_length(load_config(None, ["model.name=tiny:gpt2", "data.max_prompt_length=480",
                                                "rollout.max_new_tokens=33"]))
    message = str(info.value)
    assert "data.max_prompt_length (480)" in message and "rollout.max_new_tokens (33)" in message
    assert "n_positions = 512" in message and "at most 512" in message
    code = main(["train", *small_overrides(tmp_path, **{"rollout.max_new_tokens": 1000})])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: data.max_prompt_length (128) + rollout.max_new_tokens (1000)"), err


# ---------------------------------------------------------------------------
# Data files that are not UTF-8
# ---------------------------------------------------------------------------


def test_non_utf8_data_names_file_and_line(tmp_path, capsys):
    from verl.data.sources import DataError, read_rows

    lines = [b'{"prompt": "fine"}\n', b'{"prompt": "also fine"}\n', b'{"prompt": "caf\xe9 au lait"}\n']
    for suffix in (".jsonl", ".json"):
        path = tmp_path / f"latin1{suffix}"
        path.write_bytes(b"".join(lines))
        with pytest.raises(DataError) as info:
            read_rows(str(path))
        assert str(info.value).startswith(f"{path} line 3: not UTF-8 text (byte 0xe9")
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + lines[0])  # a UTF-8 byte-order mark is fine
    assert read_rows(str(bom))[0].prompt == "fine"
    code = main(["train", *small_overrides(tmp_path, **{"data.train_files": str(tmp_path / "latin1.jsonl")})])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "latin1.jsonl line 3: not UTF-8 text" in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------------------
# Broken model folders
# ---------------------------------------------------------------------------


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_truncated_safetensors_names_the_file_and_each_roles_key(tmp_path, tiny_gpt2):
    from verl.models.loading import ModelLoadError, load_causal_lm
    from verl.rewards.hf_rm import HFRewardModel
    from verl.workers.critic import load_value_model

    folder = _copy(tiny_gpt2, tmp_path / "cut")
    weights = folder / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # a download or copy cut short
    cfg = load_config(None, [f"model.name={folder}"])
    with pytest.raises(ModelLoadError) as info:
        load_causal_lm(cfg.model, torch.float32)
    assert str(info.value).startswith(f"model.name: cannot load a causal LM from '{folder}': {weights} is "
                                      "truncated or corrupted")
    cfg = load_config(None, [f"critic.name={folder}"])
    with pytest.raises(ModelLoadError, match=f"^critic.name: .*{weights} is truncated"):
        load_value_model(cfg.critic, cfg.model)
    from verl.config import RewardFnConfig

    with pytest.raises(ModelLoadError, match=f"^reward_fn.model_name: .*{weights} is truncated"):
        HFRewardModel(RewardFnConfig(type="huggingface_rm", model_name=str(folder))).load()


@pytest.mark.parametrize("name,content", [("tokenizer.json", '{"version": "1.0", "trunc'),
                                          ("config.json", '{"model_type": "gpt2",'),
                                          ("tokenizer_config.json", b'{"x": "\xff"}')])
def test_broken_json_file_is_named(tmp_path, tiny_gpt2, name, content):
    from verl.models.loading import ModelLoadError, load_tokenizer

    folder = _copy(tiny_gpt2, tmp_path / "broken")
    (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ModelLoadError) as info:
        load_tokenizer(str(folder), "model.tokenizer")
    message = str(info.value)
    assert message.startswith("model.tokenizer: cannot load a tokenizer") and f"{folder / name} is not" in message


REMOTE_CODE = '''
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model


class CustomConfig(GPT2Config):
    model_type = "verl_test_custom"


class CustomModel(GPT2Model):
    config_class = CustomConfig


class CustomLM(GPT2LMHeadModel):
    config_class = CustomConfig
'''


def test_critic_of_a_remote_code_model_names_critic_trust_remote_code(tmp_path, tiny_gpt2):
    from verl.models.loading import ModelLoadError, load_causal_lm
    from verl.workers.critic import load_value_model

    folder = _copy(tiny_gpt2, tmp_path / "custom")
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "verl_test_custom"  # unknown to transformers: only the folder's code loads it
    config["auto_map"] = {"AutoConfig": "modeling_custom.CustomConfig", "AutoModel": "modeling_custom.CustomModel",
                          "AutoModelForCausalLM": "modeling_custom.CustomLM"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_custom.py").write_text(REMOTE_CODE)
    cfg = load_config(None, [f"model.name={folder}", "model.trust_remote_code=true"])
    assert type(load_causal_lm(cfg.model, torch.float32)).__name__ == "CustomLM"  # the actor may run it
    with pytest.raises(ModelLoadError) as info:
        load_value_model(cfg.critic, cfg.model)  # critic.trust_remote_code is off (the default)
    message = str(info.value)
    assert message.startswith(f"critic.trust_remote_code: '{folder}' ships its own model code")
    assert "critic.trust_remote_code: true" in message and "model.trust_remote_code covers the actor only" in message
    cfg = load_config(None, [f"model.name={folder}"])
    with pytest.raises(ModelLoadError, match="^model.trust_remote_code: "):
        load_causal_lm(cfg.model, torch.float32)


# ---------------------------------------------------------------------------
# WandB
# ---------------------------------------------------------------------------


def test_wandb_logs_offline_without_an_api_key_and_says_so_once(tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    import verl.tracking.backends as backends
    from verl.config import LoggingConfig
    from verl.tracking import Tracker

    assert LoggingConfig().wandb_mode == "auto"
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "NETRC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / ".config" / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setattr(backends, "_said_offline", False)
    for run in ("run1", "run2"):
        tracker = Tracker(LoggingConfig(backends=["wandb"], project="verl-test"), str(tmp_path / run), {})
        tracker.log({"reward/mean": 1.0}, 1)
        tracker.close()
        assert [d for d in os.listdir(tmp_path / run / "wandb") if d.startswith("offline-run-")]
    lines = [line for line in capsys.readouterr().err.splitlines() if "no API key configured" in line]
    assert len(lines) == 1 and f"logging offline to {tmp_path / 'run1' / 'wandb'}" in lines[0]
    assert "wandb sync" in lines[0]
