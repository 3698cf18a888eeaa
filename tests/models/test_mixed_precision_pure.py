"""model.mixed_precision: pure -- the trained weights themselves in model.dtype, stepped by AdamW with no
float32 master copy (real verl's fsdp_config.model_dtype=bfloat16): the weights and the optimizer's moments
stay bf16 through steps, the loss is that of float32 master weights up to bf16 rounding, the memory plan
counts 8 bytes a parameter, and main_ppo's key maps to it."""

from __future__ import annotations

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.config import ConfigError


def _trainer(tmp_path, tiny_gpt2, mode, **extra):
    cfg = load_config(None, small_overrides(tmp_path / mode, **{"model.name": tiny_gpt2, "model.dtype": "bfloat16",
                                                                "model.mixed_precision": mode, "training.total_steps": 2,
                                                                "rollout.name": "hf", **extra}))
    return create_trainer(cfg)


def test_pure_keeps_weights_and_moments_in_bf16_and_trains_as_float32_masters_do(tmp_path, tiny_gpt2):
    pure = _trainer(tmp_path, tiny_gpt2, "pure")
    assert {p.dtype for p in pure.actor.model.parameters()} == {torch.bfloat16}
    first = pure.step()
    state = [s for s in pure.actor.optimizer.state.values() if "exp_avg" in s]
    assert state and {s["exp_avg"].dtype for s in state} == {torch.bfloat16}
    assert {p.dtype for p in pure.actor.model.parameters()} == {torch.bfloat16}
    second = pure.step()
    assert all(torch.isfinite(torch.tensor(m["actor/pg_loss"])) for m in (first, second))
    # the first step's samples and loss equal those of float32 master weights computing in bf16 up to the
    # weights' bf16 rounding (the same seed; bf16 keeps 8 bits: relative 2^-8 per weight)
    masters = _trainer(tmp_path, tiny_gpt2, "autocast")
    assert {p.dtype for p in masters.actor.model.parameters()} == {torch.float32}
    ref = masters.step()
    assert first["actor/pg_loss"] == pytest.approx(ref["actor/pg_loss"], abs=0.05)
    assert first["actor/entropy"] == pytest.approx(ref["actor/entropy"], rel=0.05)


def test_pure_is_full_fine_tuning_in_a_16_bit_dtype(tmp_path):
    with pytest.raises(ConfigError, match="mixed_precision: pure computes in model.dtype, which is float32"):
        load_config(None, ["model.dtype=float32", "model.mixed_precision=pure"])
    with pytest.raises(ConfigError, match="pure is for full fine-tuning"):
        load_config(None, ["model.dtype=bfloat16", "model.mixed_precision=pure", "model.lora.rank=8"])


def test_the_memory_plan_counts_two_bytes_a_weight_and_two_moments():
    import dataclasses

    from verl.trainer.memory_plan import held_bytes, update_fixed

    class Facts:  # 1000 parameters, all matrices
        params = matrix_params = 1000

    from verl.trainer import memory_plan

    fields = {f.name for f in dataclasses.fields(memory_plan.Work)}
    base = {name: None for name in fields}
    base.update(dtype="bfloat16", lora_rank=0, offload_optimizer=False, kl=False, offload_idle_models=False,
                hf_copy=False, critic=False, mixed_precision="pure")
    work = memory_plan.Work(**base)
    held, update = held_bytes(Facts, work), update_fixed(Facts, work)
    # bf16 weights 2 x 1000, AdamW's two bf16 moments 4 x 1000; the update adds bf16 gradients 2 x 1000
    assert (held.weights, held.optimizer) == (2000, 4000)
    assert (update.weights, update.grads, update.optimizer, update.other) == (2000, 2000, 4000, 0)
    masters = held_bytes(Facts, dataclasses.replace(work, mixed_precision="autocast"))
    assert (masters.weights, masters.optimizer) == (4000, 8000)  # float32 masters and moments


def test_main_ppo_maps_real_verls_model_dtype(tmp_path):
    from verl.compat.translate import load_translated, translate
    from tools.real_verl_scripts.harness import write_rows

    data = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    base = ["actor_rollout_ref.model.path=tiny:gpt2", f"data.train_files={data}", "trainer.total_training_steps=1",
            "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    cfg = load_translated(translate(base + ["actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16"]))
    assert (cfg.model.dtype, cfg.model.mixed_precision) == ("bfloat16", "pure")
    cfg = load_translated(translate(base + ["actor_rollout_ref.actor.fsdp_config.model_dtype=fp32"]))
    assert cfg.model.mixed_precision != "pure"
    with pytest.raises(ConfigError, match="give both the same dtype"):
        load_translated(translate(base + ["actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16",
                                          "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16"]))
