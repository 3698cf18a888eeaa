"""The shipped example configs load, and the CPU stand-ins run."""

import math

import pytest

from conftest import small_overrides
from verl import create_trainer, load_config


def test_seed_qwen_example_validates():
    cfg = load_config("examples/config_qwen.yaml")
    assert cfg.model.name == "Qwen/Qwen1.5-1.5B" and cfg.model.trust_remote_code
    assert cfg.reward_fn.type == "huggingface_rm" and cfg.reward_fn.device == "cpu"
    assert cfg.critic.name == "Qwen/Qwen1.5-0.5B"
    assert cfg.training.use_packed_samples and cfg.model.enable_gradient_checkpointing


@pytest.mark.parametrize("path", ["examples/quickstart.yaml", "examples/arithmetic_grpo.yaml", "examples/arithmetic_ppo.yaml",
                                  "examples/arithmetic_grpo_cpu.yaml",
                                  "examples/config_gpt2.yaml", "examples/config_qwen_tiny.yaml",
                                  "examples/agent_calculator_cpu.yaml", "examples/agent_calculator.yaml"])
def test_example_configs_validate(path):
    load_config(path)


def test_qwen_tiny_stand_in_runs(tmp_path, tiny_qwen2, tiny_gpt2, tiny_llama):
    cfg = load_config("examples/config_qwen_tiny.yaml",
                      small_overrides(tmp_path, **{"training.total_steps": 2}))
    trainer = create_trainer(cfg)
    for _ in range(2):
        m = trainer.step()
        assert math.isfinite(m["reward"]) and math.isfinite(m["vf_loss"])
