"""rollout.quantization: fp8 in the config: its defaults (TIS on, the log-prob check every step, a wider
warning level), its refusals (one line naming the key, exit 2), real verl's key, the engine-vs-actor KL
metric and the invariants' thresholds under it."""

from __future__ import annotations

import subprocess
import sys

import os

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: real_verl_gsm8k

from verl.config import ConfigError, load_config
from verl.config.auto import Platform

GPU = Platform(gpu=True, bf16=True, vllm=True, sglang=False)
CPU = Platform(gpu=False, bf16=False, vllm=False, sglang=False)


def gpu_config(*overrides):
    return load_config(None, ["rollout.name=vllm", *overrides], platform=GPU)


def test_fp8_turns_on_the_correction_and_the_per_step_check():
    cfg = gpu_config("rollout.quantization=fp8")
    assert cfg.rollout.tis_cap == 2.0  # real verl's rollout_is_threshold default
    assert cfg.rollout.logprob_check_every == 1 and cfg.training.logprob_diff_warn == 0.25
    assert cfg.model.dtype == "bfloat16"
    plain = gpu_config()
    assert (plain.rollout.tis_cap, plain.rollout.logprob_check_every, plain.training.logprob_diff_warn) == (0.0, 10, 0.1)


def test_explicit_values_win_under_fp8():
    cfg = gpu_config("rollout.quantization=fp8", "rollout.tis_cap=0", "rollout.logprob_check_every=5",
                     "training.logprob_diff_warn=0.5")
    assert (cfg.rollout.tis_cap, cfg.rollout.logprob_check_every, cfg.training.logprob_diff_warn) == (0.0, 5, 0.5)
    assert gpu_config("rollout.quantization=fp8", "rollout.tis_cap=3").rollout.tis_cap == 3.0
    # a correction given in algorithm.rollout_correction replaces the shorthand's 2.0
    cfg = gpu_config("rollout.quantization=fp8", "algorithm.rollout_correction.rollout_is=sequence")
    assert cfg.rollout.tis_cap == 0.0 and cfg.algorithm.rollout_correction.rollout_is == "sequence"


@pytest.mark.parametrize("overrides, platform, message", [
    (["rollout.quantization=fp8"], CPU, "rollout.quantization: fp8 runs on the vLLM engine"),  # CPU: hf
    (["rollout.name=vllm", "rollout.quantization=fp8"], CPU, "rollout.quantization: fp8 needs a CUDA GPU"),
    (["rollout.name=hf", "rollout.quantization=fp8"], GPU, "rollout.quantization: fp8 runs on the vLLM engine"),
    (["rollout.name=sglang", "rollout.quantization=fp8"], Platform(True, True, True, True),
     "rollout.quantization: fp8 runs on the vLLM engine"),
    (["rollout.name=vllm", "rollout.quantization=fp8", "model.dtype=float32"], GPU,
     "rollout.quantization: fp8 runs the engine in model.dtype"),
    (["rollout.name=vllm", "rollout.quantization=fp8", "distributed.backend=ray"], GPU,
     "rollout.quantization: fp8 is not supported with distributed.backend: ray"),
    (["rollout.quantization=int8"], GPU, "rollout.quantization: 'int8' is not one of fp8"),
])
def test_refusals_name_the_key(overrides, platform, message):
    with pytest.raises(ConfigError) as exc:
        load_config(None, overrides, platform=platform)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_cli_refuses_fp8_on_the_cpu_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", "device=cpu", "rollout.name=vllm",
                           "rollout.quantization=fp8", f"checkpoint.save_dir={tmp_path}/o"],
                          capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "rollout.quantization" in lines[0] and "CUDA GPU" in lines[0]


def test_real_verl_quantization_key(tmp_path):
    from real_verl_gsm8k import write_gsm8k
    from verl.compat.translate import translate

    base = [f"data.train_files={write_gsm8k(tmp_path / 'train.parquet', 4)}", "actor_rollout_ref.model.path=tiny:llama", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.name=vllm"]
    tr = translate(base + ["actor_rollout_ref.rollout.quantization=fp8"])
    assert 'rollout.quantization="fp8"' in tr.overrides
    assert not any(o.startswith("rollout.quantization") for o in translate(base).overrides)
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.quantization=torchao is not supported"):
        translate(base + ["actor_rollout_ref.rollout.quantization=torchao"])
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.quantization_config_file=a.json"):
        translate(base + ["actor_rollout_ref.rollout.quantization=fp8",
                          "actor_rollout_ref.rollout.quantization_config_file=a.json"])
    # real verl's token-level rollout correction with fp8: kept as algorithm.rollout_correction, which then
    # replaces fp8's default truncation at 2.0 (rollout.tis_cap stays 0: the correction is given once)
    tr = translate(base + ["actor_rollout_ref.rollout.quantization=fp8", "algorithm.rollout_correction.rollout_is=token",
                           "algorithm.rollout_correction.rollout_is_threshold=3.0"])
    assert 'algorithm.rollout_correction.rollout_is="token"' in tr.overrides
    assert 'algorithm.rollout_correction.rollout_is_threshold="3.0"' in tr.overrides
    assert not any(o.startswith("rollout.tis_cap") for o in tr.overrides)


def test_engine_kl_k3():
    from verl.algorithms.off_policy import engine_kl

    mask = torch.tensor([[1.0, 1.0, 0.0]])
    same = torch.tensor([[-1.0, -2.0, -3.0]])
    assert engine_kl(same, same, mask) == 0.0
    # log r = log pi_actor - log pi_engine = 0.5 and -0.5 on the two counted tokens (the third is masked):
    #   (e^0.5 - 1 - 0.5 + e^-0.5 - 1 + 0.5) / 2 = (1.648721 + 0.606531 - 2) / 2 = 0.127626
    actor = torch.tensor([[-0.5, -2.5, 9.0]])
    assert engine_kl(actor, same, mask) == pytest.approx(0.127626, abs=1e-6)
    assert engine_kl(actor, same, torch.zeros(1, 3)) == 0.0


def test_invariants_under_fp8_warn_later_and_still_stop_on_breakage():
    from verl.trainer.invariants import InvariantBroken, InvariantChecker

    said = []
    checker = InvariantChecker(gpu_config("rollout.quantization=fp8"), say=said.append)
    for step in range(1, 6):  # an FP8 engine's expected mismatch: no warning
        checker.after_step(step, {"rollout/logprob_diff": 0.2})
    assert said == []
    with pytest.raises(InvariantBroken, match="logprob_diff_stop"):  # a broken sync or wrong scales: stopped
        checker.after_step(6, {"rollout/logprob_diff": 1.5})
    plain = InvariantChecker(gpu_config(), say=said.append)
    plain.after_step(1, {"rollout/logprob_diff": 0.2})
    assert len(said) == 1 and "logprob_diff_warn 0.1" in said[0]
