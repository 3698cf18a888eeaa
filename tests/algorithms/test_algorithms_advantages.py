"""Advantage estimators against hand-derived numbers, plus invariances."""

import math

import pytest
import torch

from verl.algorithms.advantages import (
    compute_advantages,
    compute_gae,
    compute_grpo,
    compute_reinforce_pp,
    compute_reinforce_pp_baseline,
    compute_remax,
    compute_rloo,
    discounted_returns,
)


def close(a, b, tol=1e-5):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


# ----------------------------------------------------------------------------- GAE
# One response of 5 positions; position 2 is tool output (mask 0, carries a stray reward 5
# and a stray value 9 that must both be ignored), position 4 is padding.
R_GAE = torch.tensor([[0.0, 0.0, 5.0, 1.0, 0.0]])
V_GAE = torch.tensor([[0.5, 0.2, 9.0, 0.1, 7.0]])
M_GAE = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0]])


def test_gae_interior_zero_gamma_lam_one():
    # valid tokens 0, 1, 3; next(1) = 3, next(3) = end (V = 0)
    # t=3: delta = 1 + 0 - 0.1 = 0.9,        A3 = 0.9
    # t=1: delta = 0 + 0.1 - 0.2 = -0.1,     A1 = -0.1 + 0.9 = 0.8
    # t=0: delta = 0 + 0.2 - 0.5 = -0.3,     A0 = -0.3 + 0.8 = 0.5
    adv, ret = compute_gae(R_GAE, V_GAE, M_GAE, gamma=1.0, lam=1.0)
    assert close(adv, [[0.5, 0.8, 0.0, 0.9, 0.0]])
    assert close(ret, [[1.0, 1.0, 0.0, 1.0, 0.0]])  # A + V = the return-to-go 1


def test_gae_interior_zero_gamma_lam():
    # gamma = 0.9, lam = 0.8, gamma*lam = 0.72
    # t=3: delta = 1 - 0.1 = 0.9,                 A3 = 0.9
    # t=1: delta = 0.9*0.1 - 0.2 = -0.11,         A1 = -0.11 + 0.72*0.9   = 0.538
    # t=0: delta = 0.9*0.2 - 0.5 = -0.32,         A0 = -0.32 + 0.72*0.538 = 0.06736
    adv, ret = compute_gae(R_GAE, V_GAE, M_GAE, gamma=0.9, lam=0.8)
    assert close(adv, [[0.06736, 0.538, 0.0, 0.9, 0.0]])
    assert close(ret, [[0.56736, 0.738, 0.0, 1.0, 0.0]])


def test_gae_lam_zero_is_one_step_td():
    # lam = 0: A_t = delta_t = r_t + gamma V_next - V_t; gamma = 0.5
    # t=3: 1 - 0.1 = 0.9; t=1: 0.5*0.1 - 0.2 = -0.15; t=0: 0.5*0.2 - 0.5 = -0.4
    adv, _ = compute_gae(R_GAE, V_GAE, M_GAE, gamma=0.5, lam=0.0)
    assert close(adv, [[-0.4, -0.15, 0.0, 0.9, 0.0]])


def _random_rollout(seed, B=5, R=7):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(B, R, generator=g)
    values = torch.randn(B, R, generator=g)
    mask = (torch.rand(B, R, generator=g) > 0.35).float()
    mask[0] = 0.0  # an empty response
    return rewards, values, mask


def test_gae_with_gamma_lam_one_is_returns_to_go_minus_values():
    rewards, values, mask = _random_rollout(1)
    adv, ret = compute_gae(rewards, values, mask, 1.0, 1.0)
    rtg = discounted_returns(rewards, mask, 1.0)
    assert close(adv, (rtg - values) * mask)
    assert close(ret, rtg)
    assert close(ret, (adv + values) * mask)


def test_gae_skipping_masked_tokens_equals_gae_on_compacted_sequence():
    rewards, values, mask = _random_rollout(2)
    adv, ret = compute_gae(rewards, values, mask, 0.95, 0.9)
    for i in range(mask.shape[0]):
        keep = mask[i].bool()
        n = int(keep.sum())
        if n == 0:  # masked positions are written as exact zeros, not computed to zero
            assert adv[i].abs().sum() == 0
            continue
        a_c, r_c = compute_gae(rewards[i:i + 1, keep], values[i:i + 1, keep], torch.ones(1, n), 0.95, 0.9)
        assert close(adv[i, keep], a_c[0]) and close(ret[i, keep], r_c[0])
        assert adv[i, ~keep].abs().sum() == 0 and ret[i, ~keep].abs().sum() == 0


def test_discounted_returns_skip_masked():
    # mask [1 0 1], rewards [0 5 1], gamma 0.5: G2 = 1, G1 masked (reward 5 ignored), G0 = 0 + 0.5*1
    g = discounted_returns(torch.tensor([[0.0, 5.0, 1.0]]), torch.tensor([[1.0, 0.0, 1.0]]), 0.5)
    assert close(g, [[0.5, 0.0, 1.0]])


# ----------------------------------------------------------------------------- GRPO
def test_grpo_by_hand_with_singleton_group():
    # group 0: scores 1 0 0 1 -> mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3) = 0.57735
    #   A = +-0.5 / 0.57735 = +-0.866025 ; group 1 has one sample -> 0
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    adv, ret = compute_grpo(scores, mask, [0, 0, 0, 0, 1])
    a = 0.5 / math.sqrt(1 / 3)
    assert close(adv, [[a, a], [-a, 0.0], [0.0, -a], [a, a], [0.0, 0.0]])
    assert close(ret, adv)
    adv_nostd, _ = compute_grpo(scores, mask, [0, 0, 0, 0, 1], norm_by_std=False)
    assert close(adv_nostd, [[0.5, 0.5], [-0.5, 0.0], [0.0, -0.5], [0.5, 0.5], [0.0, 0.0]])


def test_grpo_all_equal_rewards_give_zero():
    adv, _ = compute_grpo(torch.tensor([2.0, 2.0, 2.0]), torch.ones(3, 4), ["p", "p", "p"])
    assert torch.equal(adv, torch.zeros(3, 4))  # exact: the mean of equal floats is that float, 2 - 2 = 0
    assert not torch.isnan(adv).any()


def test_grpo_zero_mean_unit_std_per_group_interleaved_ids():
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(12, generator=g)
    ids = ["a", "b", "c"] * 4  # groups interleaved, not contiguous
    adv, _ = compute_grpo(scores, torch.ones(12, 1), ids)
    for gid in "abc":
        sel = torch.tensor([i == gid for i in ids])
        assert abs(adv[sel, 0].mean().item()) < 1e-5
        assert adv[sel, 0].std().item() == pytest.approx(1.0, abs=1e-4)


def test_dispatcher_dr_grpo_never_divides_by_std():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv, _ = compute_advantages("dr_grpo", scores=scores, mask=torch.ones(4, 1), group_ids=[0] * 4,
                                norm_adv_by_std=True)
    assert close(adv[:, 0], [0.5, -0.5, -0.5, 0.5])


# ----------------------------------------------------------------------------- RLOO
def test_rloo_by_hand():
    # group a (n=4): A0 = 1 - (0+0+1)/3 = 2/3, A1 = 0 - (1+0+1)/3 = -2/3
    # group b (n=2): 3 - 1 = 2, 1 - 3 = -2 ;  group c (n=1): 0
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 7.0])
    ids = ["a", "a", "a", "a", "b", "b", "c"]
    mask = torch.ones(7, 2)
    mask[1, 1] = 0.0
    adv, ret = compute_rloo(scores, mask, ids)
    expected = torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, -2.0, 0.0])[:, None] * mask
    assert close(adv, expected) and close(ret, expected)


def test_rloo_is_scaled_group_centering():
    # r_i - mean_{j != i} r_j = n/(n-1) (r_i - mean_g r)
    scores = torch.randn(10, generator=torch.Generator().manual_seed(4))
    ids = [i // 5 for i in range(10)]
    adv, _ = compute_rloo(scores, torch.ones(10, 1), ids)
    centred, _ = compute_grpo(scores, torch.ones(10, 1), ids, norm_by_std=False)
    assert close(adv, centred * 5 / 4)


# ----------------------------------------------------------------------------- REINFORCE++
def test_reinforce_pp_by_hand():
    # gamma 0.5; row 0 rewards [0 1 | pad], row 1 rewards [0 0 2]
    # returns-to-go: row 0: [0.5, 1], row 1: [0.5, 1, 2]
    # valid G = 0.5 1 0.5 1 2: mean 1, sq dev .25+0+.25+0+1 = 1.5, unbiased var 1.5/4 = .375
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv, ret = compute_reinforce_pp(rewards, mask, gamma=0.5)
    s = math.sqrt(0.375)
    assert close(ret, [[0.5, 1.0, 0.0], [0.5, 1.0, 2.0]])
    assert close(adv, [[-0.5 / s, 0.0, 0.0], [-0.5 / s, 0.0, 1.0 / s]])


def test_reinforce_pp_baseline_by_hand():
    # group a: 1, 0 -> centred +0.5, -0.5 ; group b: 3, 3 -> 0, 0
    # broadcast over valid tokens: .5 .5 | -.5 | 0 0 | 0 0  (7 valid entries)
    # mean = 0.5/7 = 1/14 ; sum sq dev = sum x^2 - n mean^2 = 0.75 - 7/196 = 5/7 ; var = (5/7)/6 = 5/42
    scores = torch.tensor([1.0, 0.0, 3.0, 3.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    adv, _ = compute_reinforce_pp_baseline(scores, mask, ["a", "a", "b", "b"])
    s, m = math.sqrt(5 / 42), 1 / 14
    expected = torch.tensor([[0.5 - m, 0.5 - m], [-0.5 - m, 0.0], [-m, -m], [-m, -m]]) / s
    assert close(adv, expected * mask)
    assert abs(adv[mask.bool()].mean().item()) < 1e-6


def test_remax_by_hand():
    adv, ret = compute_remax(torch.tensor([1.0, 0.5]), torch.tensor([0.25, 1.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    assert close(adv, [[0.75, 0.75], [-0.5, 0.0]]) and close(ret, adv)


# ----------------------------------------------------------------------------- dispatcher
def test_dispatcher_matches_direct_calls_and_has_no_grad():
    rewards, values, mask = _random_rollout(5)
    values.requires_grad_(True)
    adv, ret = compute_advantages("gae", token_rewards=rewards, values=values, mask=mask, gamma=0.9, lam=0.7)
    a2, r2 = compute_gae(rewards, values, mask, 0.9, 0.7)
    assert close(adv, a2) and close(ret, r2)
    assert not adv.requires_grad
    scores = rewards.sum(-1)
    ids = [0, 0, 1, 1, 1]
    for name, direct in [
        ("grpo", compute_grpo(scores, mask, ids)),
        ("rloo", compute_rloo(scores, mask, ids)),
        ("reinforce_pp_baseline", compute_reinforce_pp_baseline(scores, mask, ids)),
        ("reinforce_pp", compute_reinforce_pp(rewards, mask, 0.9)),
        ("remax", compute_remax(scores, scores * 0.5, mask)),
    ]:
        out = compute_advantages(name, token_rewards=rewards, values=values, scores=scores,
                                 baseline_scores=scores * 0.5, mask=mask, group_ids=ids, gamma=0.9, lam=0.7)
        assert close(out[0], direct[0]), name


def test_dispatcher_errors_name_the_problem():
    with pytest.raises(ValueError, match="baseline_scores"):
        compute_advantages("remax", scores=torch.ones(2), mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match="not one of"):
        compute_advantages("vtrace", scores=torch.ones(2), mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match="group_ids"):
        compute_grpo(torch.ones(3), torch.ones(3, 2), [0, 0])
