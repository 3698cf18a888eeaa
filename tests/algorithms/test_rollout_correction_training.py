"""A few CPU training steps with each form of the rollout correction (verl/algorithms/off_policy.py): the
decoupled correction's rejection reaches the update's counts, bypass mode trains without a pi_old pass."""

import pytest

from conftest import small_overrides
from verl import create_trainer, load_config

RC = "algorithm.rollout_correction"


def _step(tmp_path, **extra):
    cfg = load_config(None, small_overrides(tmp_path, **{"algorithm.name": "grpo", "training.total_steps": 1,
                                                         "training.batch_size": 2, **extra}))
    trainer = create_trainer(cfg)
    try:
        return trainer, trainer.step()
    finally:
        trainer.run.close()


def test_decoupled_rejection_leaves_the_response_mask(tmp_path, tiny_gpt2):
    # thresholds so tight (ratio within 1e-9 of 1) that float rounding between engine and actor rejects tokens
    trainer, m = _step(tmp_path, **{f"{RC}.rollout_is": "sequence", f"{RC}.rollout_is_batch_normalize": "true",
                                   f"{RC}.rollout_rs": "token_k3", f"{RC}.rollout_rs_threshold": "1e-30"})
    batch = trainer.run.last_batch
    assert batch.is_weights is not None and "rollout_corr/rollout_is_batch_norm_factor" in m
    rejected = m["rollout_corr/rollout_rs_masked_fraction"]
    assert 0 < rejected < 1  # 0.3125 at the time of writing
    # the batch's mask is the corrected one: its tokens are what the advantages and the update counted
    valid = batch.attention_mask[:, batch.prompt_length:].float()
    assert float(batch.response_mask.sum()) == pytest.approx(float(valid.sum()) * (1 - rejected))
    assert "timing_s/old_log_prob" in m  # rejection needs pi_old before the update: not from its forward


def test_bypass_mode_trains_without_a_pi_old_pass(tmp_path, tiny_gpt2):
    trainer, m = _step(tmp_path, **{f"{RC}.bypass_mode": "true", f"{RC}.loss_type": "reinforce",
                                   f"{RC}.rollout_is": "token", f"{RC}.rollout_rs": "token_k1",
                                   f"{RC}.rollout_rs_threshold": "0.5_2.0"})
    assert trainer.config.algorithm.policy_loss == "reinforce"
    assert trainer.run.last_batch.old_log_probs is trainer.run.last_batch.rollout_log_probs
    assert "timing_s/old_log_prob" not in m and "actor/entropy" not in m and "rollout/logprob_diff" not in m
    assert "rollout_corr/rollout_is_mean" in m and m["actor/grad_norm"] > 0
