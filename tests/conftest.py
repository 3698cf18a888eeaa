"""Shared fixtures: tiny local models (built once per machine, cached) and small configs."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def tiny_gpt2() -> str:
    from verl.models.tiny import tiny_model_path

    return tiny_model_path("gpt2")


@pytest.fixture(scope="session")
def tiny_qwen2() -> str:
    from verl.models.tiny import tiny_model_path

    return tiny_model_path("qwen2")


@pytest.fixture(scope="session")
def tiny_llama() -> str:
    from verl.models.tiny import tiny_model_path

    return tiny_model_path("llama")


def small_overrides(tmp_path, **extra) -> list[str]:
    """Overrides for a run that takes a second or two per step on a CPU."""
    base = {
        "training.total_steps": 2, "training.batch_size": 4, "training.micro_batch_size": 2,
        "training.lr": 1e-3, "rollout.max_new_tokens": 8, "logging.backends": "[jsonl]",
        "logging.progress_bar": "false", "checkpoint.save_dir": str(tmp_path / "out"), "device": "cpu",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]
