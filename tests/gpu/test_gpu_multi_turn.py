"""Real verl's GSM8K multi-turn script through main_ppo on vLLM on a CUDA GPU (pytest -m gpu
tests/gpu/test_gpu_multi_turn.py): its own gsm8k_tool_config.yaml, the tool-agent rows, one step with the
multi-turn rollout on the engine. The trainer runs in a child process (vLLM keeps one engine per
process). The CPU version is tests/real_verl/test_main_ppo_multi_turn.py (generation on hf there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tools.real_verl_scripts.harness import load, provide_files, tiny_args

pytestmark = pytest.mark.gpu
SCRIPT = "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh"


def test_real_verls_gsm8k_multi_turn_script_trains_a_step_on_vllm(tmp_path, tiny_gpt2):
    examples = load()
    script = next(s for s in examples.scripts if s.name == SCRIPT)
    provide_files(examples, str(tmp_path / "real_verl"))
    args = tiny_args(script, str(tmp_path), tiny_gpt2, str(tmp_path / "real_verl"))
    args += ["actor_rollout_ref.rollout.name=vllm", "trainer.device=cuda",
             "actor_rollout_ref.rollout.gpu_memory_utilization=0.2", "actor_rollout_ref.rollout.enforce_eager=True"]
    run = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], capture_output=True, text=True,
                         timeout=540, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rollout.tool_config" in run.stderr  # the equivalent verl train line names the tool file
    metrics = [json.loads(line) for line in open(os.path.join(tmp_path, "out", "metrics.jsonl"))]
    (step,) = [m for m in metrics if "agent/turns_per_trajectory" in m]
    assert step["agent/turns_per_trajectory"] >= 1 and "rollout/logprob_diff" in step


def test_real_verls_geo3k_multi_turn_script_trains_a_step_on_vllm_with_images(tmp_path, tiny_gpt2):
    """The vision-language one: the tiny Qwen2.5-VL on vLLM, the image in every later context (the engine
    expands its unexpanded prompt ids plus the turns, checked against the actor's ids each call)."""
    from tools.real_verl_scripts.harness import VISION_FAMILY

    examples = load()
    script = next(s for s in examples.scripts if s.name == "examples/sglang_multiturn/geo3k/run_qwen2.5-3b_geo3k_multiturn.sh")
    provide_files(examples, str(tmp_path / "real_verl"))
    args = tiny_args(script, str(tmp_path), tiny_gpt2, str(tmp_path / "real_verl"), f"tiny:{VISION_FAMILY}")
    args += ["actor_rollout_ref.rollout.name=vllm", "trainer.device=cuda",
             "actor_rollout_ref.rollout.gpu_memory_utilization=0.2", "actor_rollout_ref.rollout.enforce_eager=True"]
    run = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], capture_output=True, text=True,
                         timeout=540, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    metrics = [json.loads(line) for line in open(os.path.join(tmp_path, "out", "metrics.jsonl"))]
    assert [m for m in metrics if "agent/turns_per_trajectory" in m]
