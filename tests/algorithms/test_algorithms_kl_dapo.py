"""KL estimators and controllers, entropy, DAPO extras, and preset/name consistency."""

import math

import pytest
import torch

from verl.algorithms import (
    ADV_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    PRESETS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    build_kl_controller,
    dynamic_sampling_keep,
    entropy_from_logits,
    kl_penalty,
    overlong_penalty,
)
from verl.config import AlgorithmConfig, KLControlConfig, apply_preset

LN2 = math.log(2.0)


def test_kl_estimators_by_hand():
    # token 0: logp = ln .5, ref = ln .25 -> logp - ref = ln2 ; token 1: the other way round
    logp = torch.tensor([[math.log(0.5), math.log(0.25)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.5)]])
    assert torch.allclose(kl_penalty(logp, ref, "k1"), torch.tensor([[LN2, -LN2]]))
    assert torch.allclose(kl_penalty(logp, ref, "abs"), torch.tensor([[LN2, LN2]]))
    assert torch.allclose(kl_penalty(logp, ref, "k2"), torch.tensor([[0.5 * LN2**2, 0.5 * LN2**2]]))
    # k3 = e^d - d - 1 with d = ref - logp: t0 d = -ln2 -> 0.5 + ln2 - 1 = 0.193147 ; t1 d = ln2 -> 2 - ln2 - 1
    assert torch.allclose(kl_penalty(logp, ref, "k3"), torch.tensor([[LN2 - 0.5, 1 - LN2]]))
    assert torch.allclose(kl_penalty(logp, ref, "low_var_kl"), kl_penalty(logp, ref, "k3"))
    with pytest.raises(ValueError, match="k3"):
        kl_penalty(logp, ref, "k4")


def test_k3_clamped_with_finite_gradient():
    # d = -50 -> clamp -20: e^-20 + 20 - 1 = 19.0 -> clamp 10 ; d = +50 -> e^20 - 21 -> clamp 10
    logp = torch.tensor([[0.0, -50.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-50.0, 0.0, -1.0]])
    k3 = kl_penalty(logp, ref, "k3")
    assert torch.allclose(k3, torch.tensor([[10.0, 10.0, 0.0]]))
    k3.sum().backward()
    assert torch.isfinite(logp.grad).all()


def test_k1_and_k3_are_unbiased_kl_estimates():
    # y ~ p; E[k1] = E[k3] = KL(p || q) = sum p log(p/q)
    p = torch.tensor([0.6, 0.3, 0.1])
    q = torch.tensor([0.2, 0.5, 0.3])
    true_kl = float((p * (p / q).log()).sum())  # 0.6 ln3 + 0.3 ln0.6 + 0.1 ln(1/3) = 0.4966
    y = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    logp, logq = p.log()[y][None], q.log()[y][None]
    assert kl_penalty(logp, logq, "k1").mean().item() == pytest.approx(true_kl, abs=0.01)
    assert kl_penalty(logp, logq, "k3").mean().item() == pytest.approx(true_kl, abs=0.01)
    assert kl_penalty(logp, logq, "k2").mean().item() != pytest.approx(true_kl, abs=0.01)  # k2 is biased


def test_apply_kl_in_reward_by_hand():
    # k1 = old - ref = [0.5, 0, -0.3, (masked) 2] ; beta = 0.1
    # rewards = [0 - .05, 0 - 0, 1 + .03, 0] ; mean_kl = (0.5 + 0 - 0.3)/3 (one sequence)
    scores = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.7, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    rewards, mean_kl = apply_kl_in_reward(scores, old, ref, mask, kl_coef=0.1, estimator="k1")
    assert torch.allclose(rewards, torch.tensor([[-0.05, 0.0, 1.03, 0.0]]))
    assert isinstance(mean_kl, float) and mean_kl == pytest.approx(0.2 / 3)
    # two sequences of 3 and 1 tokens: the mean of their means, as real verl's apply_kl_penalty
    # ((0.5 + 0 - 0.3) / 3 and 2 -> (0.0667 + 2) / 2 = 1.0333), not the token mean (2.2 / 4 = 0.55)
    scores2, old2 = torch.zeros(2, 4), -torch.ones(2, 4)
    ref2 = torch.stack([ref[0], torch.tensor([-3.0, -1.0, -1.0, -1.0])])
    mask2 = torch.stack([mask[0], torch.tensor([1.0, 0.0, 0.0, 0.0])])
    _, mean_kl = apply_kl_in_reward(scores2, old2, ref2, mask2, kl_coef=0.1, estimator="k1")
    assert mean_kl == pytest.approx((0.2 / 3 + 2.0) / 2)


def test_adaptive_kl_controller_by_hand():
    ctl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.05, horizon=100)
    ctl.update(0.06, n_steps=10)  # e = 0.06/0.05 - 1 = 0.2 -> beta = 0.1 * (1 + 0.2*10/100) = 0.102
    assert ctl.value == pytest.approx(0.102)
    ctl.update(0.5, n_steps=10)  # e = 9 clipped to 0.2 -> 0.102 * 1.02 = 0.10404
    assert ctl.value == pytest.approx(0.10404)
    ctl.update(0.0, n_steps=50)  # e = -1 clipped to -0.2 -> 0.10404 * (1 - 0.1) = 0.093636
    assert ctl.value == pytest.approx(0.093636)
    ctl.update(0.055, n_steps=100)  # e = 0.1 -> * 1.1 = 0.1029996
    assert ctl.value == pytest.approx(0.1029996)
    other = AdaptiveKLController(1.0, 0.05, 100)
    other.load_state_dict(ctl.state_dict())
    assert other.value == ctl.value


def test_fixed_controller_and_builder():
    fixed = FixedKLController(0.3)
    fixed.update(100.0, 1000)
    assert fixed.value == 0.3
    restored = FixedKLController(0.0)
    restored.load_state_dict(fixed.state_dict())
    assert restored.value == 0.3
    cfg = AlgorithmConfig(kl_coef=0.2, kl_ctrl=KLControlConfig(type="adaptive", target_kl=0.3, horizon=50))
    ctl = build_kl_controller(cfg)
    assert isinstance(ctl, AdaptiveKLController) and ctl.value == 0.2 and ctl.target == 0.3
    assert isinstance(build_kl_controller(AlgorithmConfig(kl_coef=0.05)), FixedKLController)


def test_entropy_by_hand_and_stable():
    # uniform over 4: ln4 ; p = [.25, .75]: -(.25 ln.25 + .75 ln.75) = 0.562335
    assert entropy_from_logits(torch.zeros(4)).item() == pytest.approx(math.log(4))
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(torch.tensor([0.0, math.log(3)])).item() == pytest.approx(h, abs=1e-6)
    assert entropy_from_logits(torch.tensor([1000.0, 1000.0 + math.log(3)])).item() == pytest.approx(h, abs=1e-4)
    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0)) * 5
    ref = torch.distributions.Categorical(logits=logits).entropy()
    assert entropy_from_logits(logits).shape == (2, 3)
    # Two formulas (ours vs torch.distributions) over 11 float32 logits up to ~15: a few ulps of
    # the terms they cancel, observed <= 1.8e-6.
    assert torch.allclose(entropy_from_logits(logits), ref, atol=1e-5)


def test_overlong_penalty_by_hand():
    # max 8, buffer 4 -> ramp starts after 4 tokens: L=4: 0 ; 6: -2/4 ; 7: -3/4 ; 8: -1 ; 9: beyond -> -1
    out = overlong_penalty(torch.tensor([3, 4, 6, 7, 8, 9]), max_len=8, buffer_len=4, penalty_factor=1.0)
    assert torch.allclose(out, torch.tensor([0.0, 0.0, -0.5, -0.75, -1.0, -1.0]))
    # factor 2: L=5 -> -(1/4)*2 = -0.5 ; L=20 -> -2
    assert torch.allclose(overlong_penalty(torch.tensor([5, 20]), 8, 4, 2.0), torch.tensor([-0.5, -2.0]))
    # buffer 0: hard cutoff
    assert torch.allclose(overlong_penalty(torch.tensor([8, 9]), 8, 0, 1.0), torch.tensor([0.0, -1.0]))


def test_dynamic_sampling_keep():
    # a: 1,0 mixed -> keep ; b: 0,0 equal -> drop ; c: single -> drop ; d: 1,1,1 equal -> drop ; e (interleaved) mixed
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0, 1.0, 1.0, 1.0, 0.2, 0.7])
    ids = ["a", "a", "b", "b", "c", "d", "d", "d", "e", "e"]
    keep = dynamic_sampling_keep(scores, ids)
    assert keep.dtype == torch.bool
    assert keep.tolist() == [True, True, False, False, False, False, False, False, True, True]
    assert dynamic_sampling_keep(scores, ids, atol=0.6).tolist()[8:] == [False, False]  # 0.5 spread <= 0.6


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_only_name_known_functions(name):
    algo = AlgorithmConfig(name=name)
    apply_preset(algo)
    assert algo.adv_estimator in ADV_ESTIMATORS
    assert algo.policy_loss in POLICY_LOSSES
    assert algo.loss_agg_mode in LOSS_AGG_MODES
    assert algo.kl_estimator in KL_ESTIMATORS
    assert not (algo.use_kl_in_reward and algo.use_kl_loss)  # never double-penalise
