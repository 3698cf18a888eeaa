"""CISPO, SAPO, GPG, GMPO, Clip-/KL-Cov losses and the GPG, OPO, GDPO, OTB estimators, each on a
case worked on paper (the comments derive the numbers), plus their presets and config rules."""

import math
from types import SimpleNamespace

import pytest
import torch

from verl.algorithms.advantages import ESTIMATORS, compute_advantages
from verl.algorithms.policy_losses import POLICY_LOSSES, compute_policy_loss
from verl.algorithms.presets import PRESETS
from verl.config.build import config_from_dict
from verl.errors import ConfigError

PARAMS = SimpleNamespace(tau_pos=1.0, tau_neg=1.05, clip_cov_ratio=0.5, clip_cov_lb=0.0, clip_cov_ub=10.0,
                         kl_cov_ratio=0.25, ppo_kl_coef=1.0)


def loss_and_grad(kind, rho, adv, mask=None, low=0.2, high=0.28, mode="token-mean"):
    """old = 0 and logp = log rho, so the ratio of token t is rho_t."""
    logp = torch.tensor(rho).log().requires_grad_(True)
    mask = torch.ones_like(logp) if mask is None else torch.tensor(mask)
    loss, metrics = compute_policy_loss(kind, logp, torch.zeros_like(logp), torch.tensor(adv), mask,
                                        clip_ratio_low=low, clip_ratio_high=high, loss_agg_mode=mode, params=PARAMS)
    loss.backward()
    return loss.item(), logp.grad, metrics


def test_cispo_by_hand():
    # rho = 1.5, 0.5, 1.1; A = 1, -1, 2; weights clip(rho, 0.8, 1.28) = 1.28, 0.8, 1.1 (constants)
    # L_t = -w A logp: -1.28 ln1.5, -0.8 ln0.5 * (-1) * ... = 0.8 ln0.5, -2.2 ln1.1
    # token-mean = (-1.28*0.405465 + 0.8*(-0.693147) - 2.2*0.0953102) / 3 = -0.42812
    loss, grad, m = loss_and_grad("cispo", [[1.5, 0.5, 1.1]], [[1.0, -1.0, 2.0]])
    assert loss == pytest.approx((-1.28 * math.log(1.5) + 0.8 * math.log(0.5) - 2.2 * math.log(1.1)) / 3, abs=1e-6)
    # dL/dlogp_t = -w_t A_t / 3: the clipped tokens keep a gradient (PPO's would be 0 at t0, t1)
    assert torch.allclose(grad, torch.tensor([[-1.28 / 3, 0.8 / 3, -2.2 / 3]]), atol=1e-6)
    assert m["pg_clipfrac"].item() == pytest.approx(2 / 3) and m["pg_clipfrac_high"].item() == pytest.approx(1 / 3)


def test_cispo_preset_has_no_lower_bound():
    # preset: clip_ratio_low 1.0 -> bound 1 - 1 = 0 (no lower bound, the paper); high 4.0 -> weights capped at 5
    _, grad, _ = loss_and_grad("cispo", [[0.1, 7.0]], [[-1.0, 1.0]], low=1.0, high=4.0)
    # t0: w = 0.1 (not raised to 0.8), dL/dlogp = -0.1 * (-1) / 2 = 0.05; t1: w = 5, -5 / 2
    assert torch.allclose(grad, torch.tensor([[0.05, -2.5]]), atol=1e-6)


def test_sapo_by_hand():
    # rho = 1: gate f(1, tau) = sigmoid(0) 4 / tau = 2 / tau; L = -f A: t0 (A=1, tau 1) -2; t1 (A=-1, tau 1.05) 2/1.05
    # seq-mean-token-mean over one sequence of 2 tokens: (-2 + 1.904762) / 2
    loss, grad, _ = loss_and_grad("sapo", [[1.0, 1.0]], [[1.0, -1.0]], mode="seq-mean-token-mean")
    assert loss == pytest.approx((-2 + 2 / 1.05) / 2, abs=1e-6)
    # df/drho at 1 = 4 sigmoid(0)(1 - sigmoid(0)) = 1 and drho/dlogp = rho = 1: grad = -A / 2, PPO's on-policy gradient
    assert torch.allclose(grad, torch.tensor([[-0.5, 0.5]]), atol=1e-6)
    # rho = 2, A = 1, tau 1: f = 4 sigmoid(1) = 2.924234; df/dlogp = 4 s (1 - s) rho = 4 * 0.731059 * 0.268941 * 2
    loss, grad, _ = loss_and_grad("sapo", [[2.0]], [[1.0]], mode="seq-mean-token-mean")
    s = 1 / (1 + math.exp(-1))
    assert loss == pytest.approx(-4 * s, abs=1e-6)
    assert grad.item() == pytest.approx(-4 * s * (1 - s) * 2, abs=1e-6)  # -1.572855: softly damped, not cut to 0


def test_gpg_loss_is_the_plain_policy_gradient():
    # L_t = -A_t logp_t whatever the ratio: rho = 3 (PPO would clip), A = 2 -> L = -2 ln3, dL/dlogp = -2
    loss, grad, _ = loss_and_grad("gpg", [[3.0]], [[2.0]])
    assert loss == pytest.approx(-2 * math.log(3), abs=1e-6) and grad.item() == pytest.approx(-2.0)


def test_geo_mean_by_hand():
    # log ratios l = 0.5, -0.1, 0.2 with A = 1 on all, clip 0.4: min(l, clip(l)) = 0.4, -0.1, 0.2
    # sequence ratio = exp(0.5 / 3) = 1.181360; L = -A * ratio
    rho = [[math.exp(0.5), math.exp(-0.1), math.exp(0.2)]]
    loss, grad, m = loss_and_grad("geo_mean", rho, [[1.0, 1.0, 1.0]], low=0.4, high=0.4, mode="seq-mean-token-mean")
    ratio = math.exp(0.5 / 3)
    assert loss == pytest.approx(-ratio, abs=1e-6)
    # dL/dl_t = -ratio / 3 on unclipped tokens, 0 on the clipped one
    assert torch.allclose(grad, torch.tensor([[0.0, -ratio / 3, -ratio / 3]]), atol=1e-6)
    assert m["pg_clipfrac"].item() == pytest.approx(1 / 3)
    # A < 0 takes the larger log ratio: l = -0.5 -> max(-0.5, -0.4) = -0.4... the pessimistic side is
    # the SMALLER |loss|: -A * exp(mean) with A = -1 -> exp(max(l, clip(l))) would grow the loss; GMPO keeps
    # sign(A) min(sign(A) l, sign(A) clip(l)) = -min(0.5, 0.4) = -0.4 -> L = exp(-0.4)
    loss, _, _ = loss_and_grad("geo_mean", [[math.exp(-0.5)]], [[-1.0]], low=0.4, high=0.4,
                               mode="seq-mean-token-mean")
    assert loss == pytest.approx(math.exp(-0.4), abs=1e-6)


def test_geo_mean_means_over_sequences_not_tokens():
    # two sequences of 1 and 3 tokens, rho = 1, A = 1 and 3: L_i = -A_i -> mean over sequences = -2
    # (a token mean would give (-1 - 3*3) / 4 = -2.5)
    loss, _, _ = loss_and_grad("geo_mean", [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]],
                               mask=[[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], mode="seq-mean-token-mean")
    assert loss == pytest.approx(-2.0, abs=1e-6)


def test_clip_cov_holds_back_the_chosen_tokens():
    # rho = 1 everywhere (nothing clipped by PPO); A = 2, 0, -2, 0; logp = 0 -> cov_t = (A_t - 0) * (0 - 0) = 0
    # for all tokens; window (0, 10) excludes 0, so nothing is held back and the loss is PPO's: mean(-A) = 0.
    loss, grad, m = loss_and_grad("clip_cov", [[1.0, 1.0, 1.0, 1.0]], [[2.0, 0.0, -2.0, 0.0]])
    assert m["pg_clipfrac"].item() == 0.0 and torch.allclose(grad, torch.tensor([[-0.5, 0.0, 0.5, 0.0]]))
    # logp = ln(e^0.1, e^-0.1, e^-0.1, e^0.1) = 0.1, -0.1, -0.1, 0.1 (mean 0); A = 2, 0, -2, 0 (mean 0):
    # cov = 0.2, 0, 0.2, 0 -> candidates t0 and t2 (in (0, 10), PPO does not clip at |l| = 0.1 < 0.2);
    # share = max(int(0.5 * 4), 1) = 2 tokens held back: both candidates -> grad 0 there.
    _, grad, m = loss_and_grad("clip_cov", [[math.exp(0.1), math.exp(-0.1), math.exp(-0.1), math.exp(0.1)]],
                               [[2.0, 0.0, -2.0, 0.0]], low=0.2, high=0.2)
    assert grad[0, 0].item() == 0.0 and grad[0, 2].item() == 0.0
    assert m["pg_clipfrac"].item() == pytest.approx(0.5)


def test_kl_cov_penalises_the_top_covariance_tokens():
    # old = 0, logp = l; A = 2, 0, -2, 0 and l = 0.1, -0.1, -0.1, 0.1: cov = 0.2, 0, 0.2, 0 ... ties at the top
    # are avoided with l = 0.3 at t0: means A 0, l 0.05 -> cov = 2*0.25, 0, -2*(-0.15), 0 = 0.5, 0, 0.3, 0
    # k = max(1, int(4 * 0.25)) = 1 -> t0 gets + |l| = 0.3. L = -A rho (+ 0.3 at t0), token-mean.
    rho = [[math.exp(0.3), math.exp(-0.1), math.exp(-0.1), math.exp(0.1)]]
    loss, grad, _ = loss_and_grad("kl_cov", rho, [[2.0, 0.0, -2.0, 0.0]])
    want = (-2 * math.exp(0.3) + 0.3 + 2 * math.exp(-0.1)) / 4
    assert loss == pytest.approx(want, abs=1e-6)
    # dL/dl at t0 = (-2 e^0.3 + 1) / 4 (the penalty's slope sign(l) = 1); t2 = 2 e^-0.1 / 4
    assert grad[0, 0].item() == pytest.approx((-2 * math.exp(0.3) + 1) / 4, abs=1e-6)
    assert grad[0, 2].item() == pytest.approx(2 * math.exp(-0.1) / 4, abs=1e-6)


def test_gpg_estimator_by_hand():
    # groups a = (1, 0), b = (1, 1), c = (0, 1); b has one reward: invalid. B = 6, B_valid = 4, alpha = 1.5
    # A = alpha (r - mean_g): a -> +-0.75, b -> 0, c -> -+0.75 (F_norm 1)
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    adv, ret = compute_advantages("gpg", mask=torch.ones(6, 2), scores=scores, group_ids=list("aabbcc"),
                                  norm_adv_by_std=False)
    assert torch.allclose(adv[:, 0], torch.tensor([0.75, -0.75, 0.0, 0.0, -0.75, 0.75]))
    assert torch.equal(adv, ret)


def test_opo_estimator_by_hand():
    # one group, lengths 2 and 4, rewards 1 and 0: b = (2*1 + 4*0) / 6 = 1/3 -> A = 2/3, -1/3
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv, _ = compute_advantages("opo", mask=mask, scores=torch.tensor([1.0, 0.0]), group_ids=["p", "p"])
    assert torch.allclose(adv, torch.tensor([[2 / 3, 2 / 3, 0.0, 0.0], [-1 / 3] * 4]), atol=1e-6)


def test_gdpo_decouples_the_components():
    # group p: sample 0 scores (10, 0), sample 1 (0, 1). Summed (GRPO): 10 vs 1 -> +-0.7071, sample 0 wins.
    # GDPO: component 0 -> +0.7071, -0.7071; component 1 -> -0.7071, +0.7071; weights 1, 1 -> sums 0, 0: each
    # sample is best at one component, so neither is pushed. Group q: (1, 1) vs (0, 0) -> sums +-1.4142.
    # Whitening the four one-token sums (0, 0, 1.4142, -1.4142): mean 0, unbiased var 4 / 3 -> (0, 0, 1.2247, -1.2247)
    parts = torch.tensor([[10.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    adv, _ = compute_advantages("gdpo", mask=torch.ones(4, 1), reward_parts=parts, reward_weights=[1.0, 1.0],
                                group_ids=list("ppqq"), norm_adv_by_std=True)
    assert torch.allclose(adv[:, 0], torch.tensor([0.0, 0.0, 1.2247, -1.2247]), atol=1e-4)
    grpo, _ = compute_advantages("grpo", mask=torch.ones(4, 1), scores=parts.sum(1), group_ids=list("ppqq"))
    assert grpo[0, 0] > 0.7  # the summed reward would push sample 0
    # weights 1, 2: sums -0.7071, +0.7071 over lengths 1 and 2 -> tokens (-0.7071, 0.7071, 0.7071):
    # mean 0.2357, unbiased var ((0.9428)^2 + 2 (0.4714)^2) / 2 = 0.6667 -> whitened (-1.1547, 0.5774, 0.5774)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    adv, _ = compute_advantages("gdpo", mask=mask, reward_parts=parts[:2], reward_weights=[1.0, 2.0],
                                group_ids=["p", "p"], norm_adv_by_std=True)
    assert torch.allclose(adv, torch.tensor([[-1.1547, 0.0], [0.5774, 0.5774]]), atol=1e-4)


def test_optimal_token_baseline_by_hand():
    # group of two, R = 2, reward 1 on sample 0's last token. Sample 0: pi = 0.5, sum pi^2 = 0.5 -> w = 1 - 1 + 0.5
    # = 0.5, W = (0.5, 1.0). Sample 1: pi = 0.9, sum pi^2 = 0.82 -> w = 1 - 1.8 + 0.82 = 0.02, W = (0.02, 0.04).
    # G = (1, 1) and (0, 0). B_t0 = 1*0.5 / (0.5 + 0.02) = 0.961538; B_t1 = 1*1.0 / 1.04 = 0.961538.
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    old = torch.tensor([[0.5, 0.5], [0.9, 0.9]]).log()
    sq = torch.tensor([[0.5, 0.5], [0.82, 0.82]])
    adv, ret = compute_advantages("optimal_token_baseline", mask=torch.ones(2, 2), token_rewards=rewards,
                                  group_ids=["p", "p"], old_log_probs=old, sum_pi_squared=sq)
    b = 0.5 / 0.52
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    assert torch.allclose(adv, torch.tensor([[1 - b, 1 - b], [-b, -b]]), atol=1e-5)
    # zero tail: lengths 3 and 1 -> sample 0 alone defines B at t >= 1, so its baseline there is 0 (A = G)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    adv, _ = compute_advantages("optimal_token_baseline", mask=mask, token_rewards=rewards, group_ids=["p", "p"],
                                old_log_probs=torch.full((2, 3), math.log(0.5)), sum_pi_squared=torch.full((2, 3), 0.5))
    # t0: W = 0.5 for both, G = 1, 0 -> B = 0.5; t1, t2: baseline 0 -> A = G = 1
    assert torch.allclose(adv, torch.tensor([[0.5, 1.0, 1.0], [-0.5, 0.0, 0.0]]), atol=1e-6)
    # alone in its group: no baseline, A = G (the authors' choice)
    adv, _ = compute_advantages("optimal_token_baseline", mask=torch.ones(1, 2), token_rewards=torch.tensor([[0.0, 1.0]]),
                                group_ids=["x"], old_log_probs=torch.zeros(1, 2), sum_pi_squared=torch.ones(1, 2))
    assert torch.allclose(adv, torch.tensor([[1.0, 1.0]]))


@pytest.mark.parametrize("name", ["cispo", "sapo", "gpg", "gmpo", "clip_cov", "kl_cov", "opo", "gdpo", "otb", "luspo"])
def test_presets_resolve(name):
    cfg = config_from_dict({"algorithm": {"name": name}})
    a = cfg.algorithm
    assert a.policy_loss in POLICY_LOSSES and a.adv_estimator in ESTIMATORS
    for k, v in PRESETS[name].items():
        assert getattr(a, k) == v or isinstance(v, dict), (k, getattr(a, k), v)


def test_geo_mean_keeps_its_own_aggregation_and_loss_agg_mode_serves_the_kl_term():
    # geo_mean's term is one number per sequence: seq-mean-token-mean whatever loss_agg_mode says, which then
    # aggregates the KL and entropy terms (as real verl's). Two sequences of 1 and 3 tokens, rho = 1, A = 1:
    # L_i = -1 each, mean -1 (a token-mean of L_i on each token would be -1 too: A = (1 | 2) tells them
    # apart: seq-mean (-1 - 2) / 2 = -1.5, token-mean (-1 - 6) / 4 = -1.75).
    import torch

    from verl.algorithms.policy_losses import compute_policy_loss

    cfg = config_from_dict({"algorithm": {"name": "grpo", "policy_loss": "geo_mean", "loss_agg_mode": "token-mean"}})
    assert cfg.algorithm.loss_agg_mode == "token-mean"
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0, 0.0, 0.0], [2.0, 2.0, 2.0]])
    zeros = torch.zeros(2, 3)
    loss, _ = compute_policy_loss("geo_mean", zeros, zeros, adv, mask, clip_ratio_low=0.4, clip_ratio_high=0.4,
                                  loss_agg_mode="token-mean")
    assert loss.item() == pytest.approx(-1.5)
    # left unset, geo_mean's aggregation serves the other terms too, whatever the preset says
    cfg = config_from_dict({"algorithm": {"name": "grpo", "policy_loss": "geo_mean"}})
    assert cfg.algorithm.loss_agg_mode == "seq-mean-token-mean"


def test_loss_params_are_checked():
    with pytest.raises(ConfigError, match="algorithm.loss_params.tau_neg"):
        config_from_dict({"algorithm": {"name": "sapo", "loss_params": {"tau_neg": 0}}})
    with pytest.raises(ConfigError, match="clip_cov_lb"):
        config_from_dict({"algorithm": {"name": "clip_cov", "loss_params": {"clip_cov_lb": 5, "clip_cov_ub": 1}}})
