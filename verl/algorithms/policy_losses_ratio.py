"""Policy losses that reshape the importance ratio rho_t = exp(logp_t - old_t) (registered into
POLICY_LOSSES; see policy_loss_base.py for the interface). Each returns the per-token loss to
minimise (B, R); the caller aggregates it.

  cispo     Clipped IS-weight Policy Optimization (MiniMax 2025, "MiniMax-M1", section 3.1):
                L_t = -sg[clip(rho_t, 1 - eps_low, 1 + eps_high)] * A_t * logp_t
            The weight is a constant, so every token keeps a gradient (PPO drops the clipped
            ones); at rho = 1 the gradient is -A_t grad logp_t, PPO's. The paper bounds rho from
            above only (eps_low large); its preset (presets.py) caps rho at 5 (ScaleRL's
            eps_max = 5, Khatri et al. 2025, which TRL recommends) with no lower bound.
  sapo      Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv 2511.20347): a smooth gate
            in place of the hard clip,
                f(rho, tau) = sigmoid(tau (rho - 1)) * 4 / tau,    L_t = -f(rho_t, tau_t) A_t
            with tau_t = tau_pos where A_t > 0 and tau_neg otherwise (paper: 1.0 and 1.05),
            averaged per sequence (seq-mean-token-mean, the paper's and real verl's, whatever
            algorithm.loss_agg_mode says: that one aggregates the KL and entropy terms).
            d f / d rho = 4 sigmoid(.)(1 - sigmoid(.)): 1 at rho = 1 (PPO's on-policy gradient),
            decaying smoothly off-policy; a larger tau decays faster.
  geo_mean  Geometric-Mean Policy Optimization (Zhao et al. 2025, "GMPO", arXiv 2507.20673): one
            ratio per sequence, the geometric mean of its token ratios, each clipped in log space
            the pessimistic way,
                l_t  = sign(A) * min(sign(A) (logp_t - old_t), sign(A) clip(logp_t - old_t, -eps_low, eps_high))
                L_i  = -A_i * exp( (1/|y_i|) sum_t m_t l_t ),     A_i = (1/|y_i|) sum_t m_t A_t
            averaged over sequences (agg_mode seq-mean-token-mean: L_i on each valid token of i).
            The paper clips at (e^-0.4, e^0.4). Real verl divides by B, counting sequences with no
            valid token; here they are left out (the same when every sequence has a token).
            Importance weights w_t (is_weights) enter per sequence as their geometric mean, as real
            verl's: L_i = -A_i * exp((1/|y_i|) sum_t m_t l_t) * exp((1/|y_i|) sum_t m_t log w_t);
            w = (0.5, 2), A = 1, rho = 1 gives L = -1 (their arithmetic mean would give -1.25).
            The mean over sequences is over the optimizer step's mini-batch, whatever the
            micro-batching; real verl's is a mean per micro-batch, and its micro-batch losses are
            summed, so its step there is k times this one for k micro-batches per mini-batch (the
            same for one micro-batch). Here micro-batching stays a memory setting.
"""

from __future__ import annotations

import torch

from verl.algorithms.masked import masked_mean
from verl.algorithms.policy_loss_base import MAX_LOG_RATIO, PolicyLossInputs, policy_loss


def _fraction(condition: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_mean(condition.to(mask.dtype), mask)


@policy_loss("cispo")
def _cispo(x: PolicyLossInputs):
    ratio = torch.exp(x.log_ratio.detach().clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))  # (B, R), a constant
    weight = ratio.clamp(1.0 - x.clip_low, 1.0 + x.clip_high)
    high, low = ratio > 1.0 + x.clip_high, ratio < 1.0 - x.clip_low
    metrics = dict(pg_clipfrac=_fraction(high | low, x.mask), pg_clipfrac_high=_fraction(high, x.mask),
                   pg_clipfrac_low=_fraction(low, x.mask))
    return -weight * x.advantages * x.log_probs, metrics


@policy_loss("sapo", agg_mode="seq-mean-token-mean")
def _sapo(x: PolicyLossInputs):
    ratio = torch.exp(x.log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))  # (B, R)
    tau = torch.where(x.advantages > 0, float(x.param("tau_pos")), float(x.param("tau_neg"))).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    return -gate * x.advantages, {}


@policy_loss("geo_mean", agg_mode="seq-mean-token-mean", own_is_weights=True)
def _geo_mean(x: PolicyLossInputs):
    log_ratio = x.log_ratio  # (B, R)
    sign = torch.sign(x.advantages)
    clamped = log_ratio.clamp(-x.clip_low, x.clip_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)  # (B, R)
    seq_ratio = torch.exp(masked_mean(pessimistic, x.mask, dim=-1))  # (B,) geometric mean of the ratios
    seq_adv = masked_mean(x.advantages, x.mask, dim=-1)  # (B,)
    loss_seq = -seq_adv * seq_ratio  # (B,)
    if x.is_weights is not None:  # their geometric mean per sequence (a constant)
        loss_seq = loss_seq * torch.exp(masked_mean(torch.log(x.is_weights + 1e-10), x.mask, dim=-1))
    active = ((pessimistic != log_ratio) & (sign != 0)).detach()  # a bound took over (A = 0 tokens carry no loss)
    metrics = dict(pg_clipfrac=_fraction(active, x.mask), pg_clipfrac_high=_fraction(active & (sign > 0), x.mask),
                   pg_clipfrac_low=_fraction(active & (sign < 0), x.mask))
    return loss_seq[:, None].expand_as(log_ratio), metrics
