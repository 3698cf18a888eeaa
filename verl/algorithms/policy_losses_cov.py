"""Policy losses that single out the tokens whose log-probability moves with their advantage,
from Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (section 4): the entropy of the policy falls as Cov(logp, A) is positive, so a few
high-covariance tokens are held back. Registered into POLICY_LOSSES (policy_loss_base.py).

The covariance term of token t, over the valid tokens of the batch the loss sees:

    cov_t = (A_t - mean(A)) * (logp_t - mean(logp))          (means over valid tokens, logp detached)

  clip_cov  PPO's clipped loss, but a random clip_cov_ratio share of the valid tokens (at least 1)
            among those PPO did not clip whose cov_t lies in (clip_cov_lb, clip_cov_ub) lose their
            gradient (their loss is multiplied by 0):  L_t = c_t max(-A_t rho_t, -A_t clip(rho_t)),
            with no dual clip (neither the paper's code nor real verl's reads clip_ratio_c).
  kl_cov    No clipping; the top kl_cov_ratio share of valid tokens by cov_t (at least 1) pay a KL
            penalty:  L_t = -A_t rho_t + ppo_kl_coef |logp_t - old_t| there, -A_t rho_t elsewhere.

The paper's defaults: clip_cov_ratio 2e-4, bounds (1, 5); kl_cov_ratio 2e-4, ppo_kl_coef 1
(algorithm.loss_params; real verl's PolicyLossConfig has ppo_kl_coef 0.1, which main_ppo sets). Like the paper's code, the means and the selection are
over the micro-batch the loss is called on, so these two losses (alone here) change with the
micro-batching; the random selection of clip_cov draws from torch's generator, which the trainer
seeds per step.
"""

from __future__ import annotations

import torch

from verl.algorithms.masked import masked_mean
from verl.algorithms.policy_loss_base import PolicyLossInputs, clipped_surrogate, policy_loss


def _covariance(x: PolicyLossInputs) -> torch.Tensor:
    """cov_t (B, R) as in the module docstring; garbage on masked tokens (callers mask it)."""
    logp = x.log_probs.detach()
    return (x.advantages - masked_mean(x.advantages, x.mask)) * (logp - masked_mean(logp, x.mask))


@policy_loss("clip_cov")
def _clip_cov(x: PolicyLossInputs):
    ratio = torch.exp(x.log_ratio)
    loss, metrics = clipped_surrogate(ratio, x.advantages, x.mask, x.clip_low, x.clip_high, 0.0)
    valid = x.mask > 0
    unclipped_by_ppo = -x.advantages * ratio >= -x.advantages * ratio.clamp(1.0 - x.clip_low, 1.0 + x.clip_high)
    cov = _covariance(x)
    lower, upper = float(x.param("clip_cov_lb")), float(x.param("clip_cov_ub"))
    candidates = torch.nonzero(valid & unclipped_by_ppo & (cov > lower) & (cov < upper))  # (n, 2)
    share = max(int(float(x.param("clip_cov_ratio")) * int(valid.sum())), 1)
    keep = torch.ones_like(loss)
    if len(candidates):
        chosen = candidates[torch.randperm(len(candidates))[:share].to(candidates.device)]
        keep[chosen[:, 0], chosen[:, 1]] = 0.0
    metrics["pg_clipfrac"] = masked_mean((keep == 0).to(loss.dtype), x.mask)  # the tokens held back
    return loss * keep, metrics


@policy_loss("kl_cov")
def _kl_cov(x: PolicyLossInputs):
    log_ratio = x.log_ratio
    loss = -x.advantages * torch.exp(log_ratio)  # (B, R)
    flat_valid = torch.nonzero((x.mask > 0).reshape(-1), as_tuple=True)[0]  # (n,) row-major positions
    if len(flat_valid):
        cov = _covariance(x).reshape(-1)[flat_valid]
        k = max(1, int(len(flat_valid) * float(x.param("kl_cov_ratio"))))
        picked = torch.zeros(loss.numel(), dtype=torch.bool, device=loss.device)
        picked[flat_valid[torch.topk(cov, k).indices]] = True
        penalty = float(x.param("ppo_kl_coef")) * log_ratio.abs()
        loss = torch.where(picked.view_as(loss), loss + penalty, loss)
    return loss, {}
