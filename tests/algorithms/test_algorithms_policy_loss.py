"""Policy losses (ppo, gspo, reinforce) and the value loss, against hand-derived numbers."""

import math

import pytest
import torch

from verl.algorithms.aggregation import LOSS_AGG_MODES
from verl.algorithms.masked import count_tokens_and_seqs
from verl.algorithms.policy_losses import compute_policy_loss
from verl.algorithms.value_loss import compute_value_loss, explained_variance


def ppo(log_probs, old, adv, mask, low=0.2, high=0.2, c=0.0, mode="token-mean", **kw):
    return compute_policy_loss("ppo", log_probs, old, adv, mask, clip_ratio_low=low, clip_ratio_high=high,
                               clip_ratio_c=c, loss_agg_mode=mode, **kw)


# ratios rho = 1.5, 0.5, 1.1, 0.7 (old = 0, logp = log rho) with advantages 1, -1, -2, 2
RHO = torch.tensor([[1.5, 0.5, 1.1, 0.7]])
ADV = torch.tensor([[1.0, -1.0, -2.0, 2.0]])
ONES = torch.ones(1, 4)


def test_ppo_asymmetric_clip_by_hand():
    # low = 0.2, high = 0.28 -> rho clipped to [0.8, 1.28]; L = max(-A rho, -A clip(rho))
    # t0: max(-1.5, -1.28) = -1.28  (upper bound active)
    # t1: max( 0.5,  0.8 ) =  0.8   (lower bound active)
    # t2: max( 2.2,  2.2 ) =  2.2
    # t3: max(-1.4, -1.6 ) = -1.4
    # token-mean: (-1.28 + 0.8 + 2.2 - 1.4) / 4 = 0.08
    logp = RHO.log().requires_grad_(True)
    loss, m = ppo(logp, torch.zeros(1, 4), ADV, ONES, low=0.2, high=0.28)
    assert loss.item() == pytest.approx(0.08, abs=1e-6)
    assert m["pg_clipfrac"].item() == pytest.approx(0.5)
    assert m["pg_clipfrac_high"].item() == pytest.approx(0.25)
    assert m["pg_clipfrac_low"].item() == pytest.approx(0.25)
    assert m["pg_clipfrac_lower"].item() == 0.0
    # ppo_kl = mean(old - logp) = -(ln1.5 + ln0.5 + ln1.1 + ln0.7)/4
    assert m["ppo_kl"].item() == pytest.approx(-math.log(1.5 * 0.5 * 1.1 * 0.7) / 4, abs=1e-6)
    # dL/dlogp_t = -A_t rho_t / 4 where unclipped, 0 where a bound is active:
    # t2: 2*1.1/4 = 0.55 ; t3: -2*0.7/4 = -0.35
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0, 0.55, -0.35]]), atol=1e-6)


def test_ppo_symmetric_clip_differs_from_clip_higher():
    # high = 0.2: t0 becomes max(-1.5, -1.2) = -1.2 -> (-1.2 + 0.8 + 2.2 - 1.4)/4 = 0.1
    loss, _ = ppo(RHO.log(), torch.zeros(1, 4), ADV, ONES, low=0.2, high=0.2)
    assert loss.item() == pytest.approx(0.1, abs=1e-6)


def test_ppo_dual_clip_by_hand():
    # c = 3, clip [0.8, 1.2]
    # t0: A=-1, rho=5: max(5, 1.2) = 5 -> min(5, 3) = 3   (dual bound active, no gradient)
    # t1: A=-1, rho=2: max(2, 1.2) = 2 -> min(2, 3) = 2
    # t2: A=+1, rho=5: max(-5, -1.2) = -1.2 (dual clip never touches A > 0)
    rho = torch.tensor([[5.0, 2.0, 5.0]])
    adv = torch.tensor([[-1.0, -1.0, 1.0]])
    logp = rho.log().requires_grad_(True)
    loss, m = ppo(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), c=3.0)
    assert loss.item() == pytest.approx((3 + 2 - 1.2) / 3, abs=1e-6)
    assert m["pg_clipfrac_lower"].item() == pytest.approx(1 / 3)
    loss.backward()
    # t1 unclipped: -A rho / 3 = 2/3 ; t0, t2 clipped -> 0
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 2 / 3, 0.0]]), atol=1e-6)
    no_dual, _ = ppo(rho.log(), torch.zeros(1, 3), adv, torch.ones(1, 3), c=0.0)
    assert no_dual.item() == pytest.approx((5 + 2 - 1.2) / 3, abs=1e-6)


def test_masked_garbage_does_not_leak():
    # position 2 is masked and holds absurd log-probs: loss and grads stay finite and unchanged
    logp = torch.tensor([[-1.0, -2.0, 500.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.0, -500.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, m = ppo(logp, old, adv, mask)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0)  # rho = 1 on both valid tokens: -(1 + 1)/2
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 2] == 0
    assert m["ppo_kl"].item() == 0.0


def test_gspo_sequence_ratio_by_hand():
    # one sequence, valid tokens 0 and 1, old = 0, logp = [ln 2, 0] (token 2 masked garbage)
    # s = exp((ln2 + 0)/2) = sqrt(2) = 1.414214 on every token; A = 1; bounds [0.5, 1.5]: not clipped
    # seq-mean-token-mean: L = -sqrt(2);  dL/dlogp_t = -A s / |y| = -sqrt(2)/2 on valid tokens
    logp = torch.tensor([[math.log(2.0), 0.0, 40.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, m = compute_policy_loss("gspo", logp, torch.zeros(1, 3), torch.ones(1, 3), mask, clip_ratio_low=0.5,
                                  clip_ratio_high=0.5, loss_agg_mode="seq-mean-token-mean")
    assert loss.item() == pytest.approx(-math.sqrt(2), abs=1e-6)
    loss.backward()
    h = -math.sqrt(2) / 2
    assert torch.allclose(logp.grad, torch.tensor([[h, h, 0.0]]), atol=1e-6)
    assert m["pg_clipfrac"].item() == 0.0
    # high = 0.3: s = 1.414 > 1.3, the whole sequence is clipped: L = -1.3, no gradient
    logp.grad = None
    loss, m = compute_policy_loss("gspo", logp, torch.zeros(1, 3), torch.ones(1, 3), mask, clip_ratio_low=0.3,
                                  clip_ratio_high=0.3, loss_agg_mode="seq-mean-token-mean")
    assert loss.item() == pytest.approx(-1.3, abs=1e-6)
    assert m["pg_clipfrac"].item() == 1.0
    loss.backward()
    assert torch.count_nonzero(logp.grad) == 0


def test_gspo_gradient_equals_sequence_level_objective():
    # Unclipped GSPO-token with sequence-constant A equals -(1/S) sum_i A_i s_i, s_i = exp(mean log-ratio)
    g = torch.Generator().manual_seed(7)
    old = torch.randn(4, 6, generator=g) * 0.01 - 2
    logp = (old + torch.randn(4, 6, generator=g) * 0.01).requires_grad_(True)
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    adv_seq = torch.randn(4, generator=g)
    loss, _ = compute_policy_loss("gspo", logp, old, adv_seq[:, None].expand(4, 6), mask, clip_ratio_low=10.0,
                                  clip_ratio_high=10.0, loss_agg_mode="seq-mean-token-mean")
    (grad_tok,) = torch.autograd.grad(loss, logp)
    s = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1))
    ref = -(adv_seq * s).mean()
    (grad_seq,) = torch.autograd.grad(ref, logp)
    assert loss.item() == pytest.approx(ref.item(), abs=1e-6)
    assert torch.allclose(grad_tok, grad_seq, atol=1e-6)


def test_reinforce_by_hand_and_is_weights():
    # L = -A logp: t0 -(1)(-1) = 1, t1 -(0.5)(-2) = 1 -> token-mean 1 ; grad -A/2 = [-0.5, -0.25]
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 0.5]])
    kw = dict(clip_ratio_low=0.2, clip_ratio_high=0.2, loss_agg_mode="token-mean")
    loss, m = compute_policy_loss("reinforce", logp, logp.detach() + 0.3, adv, torch.ones(1, 2), **kw)
    assert loss.item() == pytest.approx(1.0)
    assert m["pg_clipfrac"] == 0 and m["ppo_kl"].item() == pytest.approx(0.3)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -0.25]]))
    # truncated IS weights 2, 0.5 scale each token: (2*1 + 0.5*1)/2 = 1.25
    loss, _ = compute_policy_loss("reinforce", logp, logp.detach(), adv, torch.ones(1, 2),
                                  is_weights=torch.tensor([[2.0, 0.5]]), **kw)
    assert loss.item() == pytest.approx(1.25)


def test_reinforce_gradient_equals_ppo_on_policy():
    g = torch.Generator().manual_seed(8)
    logp = (torch.randn(3, 5, generator=g) - 2).requires_grad_(True)
    adv, mask = torch.randn(3, 5, generator=g), (torch.rand(3, 5, generator=g) > 0.3).float()
    grads = []
    for kind in ("reinforce", "ppo"):
        loss, _ = compute_policy_loss(kind, logp, logp.detach(), adv, mask, clip_ratio_low=0.2,
                                      clip_ratio_high=0.2, loss_agg_mode="token-mean")
        grads.append(torch.autograd.grad(loss, logp)[0])
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert grads[0].abs().sum() > 0


@pytest.mark.parametrize("kind", ["ppo", "gspo", "reinforce"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_policy_gradient_split_equals_whole(kind, mode):
    g = torch.Generator().manual_seed(9)
    B, R = 6, 5
    old = torch.randn(B, R, generator=g) - 1
    logp = (old + 0.3 * torch.randn(B, R, generator=g)).requires_grad_(True)  # some tokens get clipped
    adv = torch.randn(B, R, generator=g)
    mask = (torch.rand(B, R, generator=g) > 0.3).float()
    mask[4] = 0.0
    kw = dict(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0 if kind == "ppo" else 0.0,
              loss_agg_mode=mode, max_response_len=R)
    whole, _ = compute_policy_loss(kind, logp, old, adv, mask, **kw)
    (g_whole,) = torch.autograd.grad(whole, logp)
    n_tok, n_seq = count_tokens_and_seqs(mask)
    total = 0.0
    for sl in (slice(0, 1), slice(1, 4), slice(4, 6)):
        part, _ = compute_policy_loss(kind, logp[sl], old[sl], adv[sl], mask[sl], num_tokens=n_tok,
                                      num_seqs=n_seq, **kw)
        total = total + part
    (g_split,) = torch.autograd.grad(total, logp)
    assert total.item() == pytest.approx(whole.item(), abs=1e-6)
    assert torch.allclose(g_split, g_whole, atol=1e-7)
    assert g_whole.abs().sum() > 0


def test_unknown_policy_loss_raises():
    with pytest.raises(ValueError, match="ppo"):
        compute_policy_loss("trpo", torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1),
                            clip_ratio_low=0.2, clip_ratio_high=0.2)


# ----------------------------------------------------------------------------- value loss
def test_value_loss_by_hand():
    # c = 0.2 ; V_clip = old + clip(V - old, -0.2, 0.2)
    # t0: V=1, old=1.5, R=1.5: V_clip=1.3; (1-1.5)^2=.25 vs (1.3-1.5)^2=.04 -> 0.5*.25 = 0.125
    # t1: V=2, old=1,   R=3:   V_clip=1.2; (2-3)^2=1   vs (1.2-3)^2=3.24 -> 0.5*3.24 = 1.62 (clipped)
    # t2: V=2, old=1,   R=1.5: V_clip=1.2; .25 vs .09 -> 0.125
    # t3: masked garbage
    # token-mean: (0.125 + 1.62 + 0.125)/3 = 0.623333 ; vf_clipfrac = 1/3
    values = torch.tensor([[1.0, 2.0, 2.0, 1e6]], requires_grad=True)
    old = torch.tensor([[1.5, 1.0, 1.0, 0.0]])
    returns = torch.tensor([[1.5, 3.0, 1.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, m = compute_value_loss(values, old, returns, mask, cliprange_value=0.2)
    assert loss.item() == pytest.approx(1.87 / 3, abs=1e-6)
    assert m["vf_clipfrac"].item() == pytest.approx(1 / 3)
    loss.backward()
    # dL/dV: t0 (V-R)/3 = -0.5/3 ; t1 clipped -> 0 ; t2 0.5/3 ; t3 masked 0
    assert torch.allclose(values.grad, torch.tensor([[-0.5 / 3, 0.0, 0.5 / 3, 0.0]]), atol=1e-6)
    # no clipping: 0.5 * (.25 + 1 + .25) / 3 = 0.25
    loss, m = compute_value_loss(values, old, returns, mask, cliprange_value=None)
    assert loss.item() == pytest.approx(0.25) and m["vf_clipfrac"].item() == 0.0


def test_explained_variance_by_hand():
    r = torch.tensor([[1.0, 2.0, 3.0, 4.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(r.clone(), r, mask) == pytest.approx(1.0)
    assert explained_variance(torch.zeros_like(r), r, mask) == pytest.approx(0.0, abs=1e-6)
    # R - V = 0 0 0 -1: var (unbiased) = (3*.0625 + .5625)/3 = .25 ; var R = 5/3 -> 1 - .15 = .85
    assert explained_variance(torch.tensor([[1.0, 2.0, 3.0, 5.0, 0.0]]), r, mask) == pytest.approx(0.85, abs=1e-6)
    assert explained_variance(torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3)) == 0.0
