"""Every algorithm preset runs end to end on CPU: finite metrics, the policy changes."""

import math

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.algorithms.presets import PRESETS


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_short_run(tmp_path, tiny_gpt2, preset):
    cfg = load_config(None, small_overrides(tmp_path, **{"algorithm.name": preset, "training.batch_size": 2,
                                                         "training.lr": 1e-2}))
    trainer = create_trainer(cfg)
    assert (trainer.critic is not None) == (cfg.algorithm.adv_estimator == "gae")
    assert (trainer.reference is not None) == (cfg.algorithm.use_kl_in_reward or cfg.algorithm.use_kl_loss)
    before = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    for _ in range(cfg.training.total_steps):
        m = trainer.step()
        for key in ("reward", "kl", "entropy", "pg_loss", "actor/grad_norm", "actor/pg_clipfrac"):
            assert math.isfinite(m[key]), (preset, key, m[key])
    changed = sum(not torch.equal(before[n], p.detach()) for n, p in trainer.actor.model.named_parameters())
    assert changed == len(before), f"{preset}: {len(before) - changed} parameter tensors unchanged"
    if preset == "dapo":
        assert "rollout/dynamic_dropped" in m and "reward/overlong_penalty" in m
    batch = trainer.run.last_batch
    if preset == "gdpo":  # the reward's one component, kept per sample for the decoupled normalisation
        assert batch.reward_parts.shape == (len(batch), 1)
        assert torch.allclose(batch.reward_parts[:, 0] * trainer.reward_weights[0], batch.scores)
    if preset == "otb":  # sum_v pi(v)^2 of each response position, from the log-prob pass: in (0, 1]
        sq = batch.sum_pi_squared[batch.response_mask > 0]
        assert sq.numel() and bool((sq > 0).all() and (sq <= 1 + 1e-5).all())


def test_critic_warmup_trains_only_the_critic_first(tmp_path, tiny_gpt2):
    cfg = load_config(None, small_overrides(tmp_path, **{"algorithm.critic_warmup": 1, "training.total_steps": 2}))
    trainer = create_trainer(cfg)
    actor0 = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    critic0 = {n: p.detach().clone() for n, p in trainer.critic.model.named_parameters()}
    m = trainer.step()
    assert "actor/pg_loss" not in m and "critic/vf_loss" in m
    assert all(torch.equal(actor0[n], p) for n, p in trainer.actor.model.named_parameters())
    assert not all(torch.equal(critic0[n], p) for n, p in trainer.critic.model.named_parameters())
    m = trainer.step()
    assert "actor/pg_loss" in m
    assert not all(torch.equal(actor0[n], p) for n, p in trainer.actor.model.named_parameters())


def test_gdpo_normalises_each_component_of_a_combined_reward(tmp_path, tiny_gpt2):
    # two components: a length penalty and a keyword reward; the batch keeps both per sample, and the
    # advantages are gdpo's of those parts with the components' weights (compute_gdpo on the same inputs)
    from verl.algorithms.group_baselines import compute_gdpo

    cfg = load_config(None, small_overrides(tmp_path, **{
        "algorithm.name": "gdpo", "training.total_steps": 1, "rollout.n": 4,
        "reward_fn.type": "combined",
        "reward_fn.components": '[{type: length_penalty, name: short, weight: 0.5, target_length: 3}, '
                                '{type: keyword, name: kw, weight: 2.0, keywords: ["the"]}]'}))
    trainer = create_trainer(cfg)
    trainer.step()
    batch = trainer.run.last_batch
    assert batch.reward_parts.shape == (len(batch), 2) and trainer.reward_weights == [0.5, 2.0]
    assert torch.allclose(batch.reward_parts @ torch.tensor([0.5, 2.0]), batch.scores, atol=1e-6)
    want, _ = compute_gdpo(batch.reward_parts, [0.5, 2.0], batch.response_mask, batch.group_id)
    assert torch.allclose(batch.advantages, want, atol=1e-6) and want.abs().sum() > 0  # the lengths differ
