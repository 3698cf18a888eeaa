"""Group-baseline advantage estimators of 2025-26 (registered into ESTIMATORS, advantages.py).

Like the estimators there: no gradient, (advantages (B, R), returns (B, R)), 0 on masked tokens;
`group_ids` (B,) says which samples answer the same prompt; scores (B,) are sequence rewards.
A sequence alone in its group gets advantage 0 in gpg, opo and gdpo, as in grpo/rloo here, or with
`algorithm.group_of_one: score` (main_ppo's) real verl's baseline 0: alpha r, r, r / (1 + eps)
before gdpo's whitening; optimal_token_baseline follows its authors and gives it its return (no
baseline) either way.

  gpg     Chu et al. 2025 ("GPG: A Simple and Strong RL Baseline for Model Reasoning", eq. 6-8):
              A_i = alpha (r_i - mean_g(i) r) / F_norm,    alpha = B / B_valid
          B_valid: samples of groups whose rewards are not all equal (the paper's B - M, M the
          samples with zero advantage), so that the valid samples' gradient is not diluted by
          the invalid ones; F_norm = std_g(i) r + eps with norm_by_std, else 1 (the paper's
          default). Real verl divides by the count of samples with a nonzero reward instead,
              alpha = B / max(1, #{i: r_i != 0})      (algorithm.gpg_alpha: nonzero; main_ppo's)
          and never divides by the std: rewards (1, 0, 0, 0) in one group give (3, -1, -1, -1)
          there (alpha 4, mean 1/4), (0.75, -0.25, -0.25, -0.25) with alpha = B / B_valid = 1.
  opo     Hao et al. 2025 ("On-Policy RL with Optimal Reward Baseline", arXiv 2505.23585): the
          length-weighted baseline that minimises the gradient variance when the gradient norm
          grows with the response length |y|,
              b_g = sum_{j in g} |y_j| r_j / sum_{j in g} |y_j|,    A_i = r_i - b_g(i)
  gdpo    Group reward-Decoupled normalisation Policy Optimization (NVIDIA 2026, arXiv 2601.05242):
          each reward component k is group-normalised on its own, so a large component cannot
          drown a small one, then weighted, summed and whitened over the batch:
              A_i = whiten_batch( sum_k w_k (r_ik - mean_g r_k) / (std_g r_k + eps) )
  optimal_token_baseline   (OTB; real verl's `optimal_token_baseline`): a baseline per token,
          the return weighted by the path's accumulated score-function variance,
              G_t = sum_{k >= t} r_k,   w_t = 1 - 2 pi_t + sum_v pi_v^2   (||grad log pi_t||^2 proxy)
              W_t = sum_{j <= t} m_j w_j,   B_t = sum_g G_t W_t m_t / (sum_g W_t m_t + eps)
              A_t = (G_t - B_t) m_t
          where pi_t is pi_old of the sampled token and sum_v pi_v^2 its distribution's squared
          norm (the actor's log-prob pass computes it when the estimator asks). With
          `handle_zero_tail`, the tail of a group's single longest response beyond the second
          longest gets baseline 0 (it alone defines B there, which would zero its advantage).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from verl.algorithms.advantages import AdvantageInputs, broadcast_over_tokens, compute_grpo, estimator
from verl.algorithms.masked import group_index, group_stats, masked_whiten

Tensor = torch.Tensor


@torch.no_grad()
def compute_gpg(scores: Tensor, mask: Tensor, group_ids: Sequence, norm_by_std: bool = False,
                alpha: Optional[float] = None, eps: float = 1e-6, alpha_count: str = "valid",
                group_of_one: str = "zero") -> tuple[Tensor, Tensor]:
    """GPG advantage (module docstring); `alpha` None: B / B_valid (alpha_count "valid") or
    B / (samples with a nonzero reward) (alpha_count "nonzero", real verl's)."""
    size, mean, std = group_stats(scores, group_ids)
    in_group = size > 1
    if group_of_one == "score":  # alone: mean 0, std 1, and it counts (real verl's rule)
        mean = torch.where(in_group, mean, torch.zeros_like(mean))
        std = torch.where(in_group, std, torch.ones_like(std))
        in_group = torch.ones_like(in_group)
    if alpha is None and alpha_count == "nonzero":
        alpha = len(scores) / max(1, int(torch.count_nonzero(scores)))
    if alpha is None:
        valid = in_group & (std > 0)
        alpha = len(scores) / max(1, int(valid.sum()))
    adv = scores - mean
    if norm_by_std:
        adv = adv / (std + eps)
    adv = torch.where(in_group, alpha * adv, torch.zeros_like(adv))
    adv = broadcast_over_tokens(adv, mask)
    return adv, adv.clone()


@torch.no_grad()
def compute_opo(scores: Tensor, mask: Tensor, group_ids: Sequence,
                group_of_one: str = "zero") -> tuple[Tensor, Tensor]:
    """OPO advantage: r_i minus the length-weighted group mean (module docstring); alone in its group:
    0, or r_i with group_of_one "score"."""
    idx, num_groups = group_index(group_ids, scores.device)
    lengths = mask.to(torch.float64).sum(dim=-1)  # (B,) |y_i|
    r = scores.to(torch.float64)
    weighted = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, lengths * r)
    total_len = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, lengths)
    size = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(r))
    baseline = torch.where(total_len > 0, weighted / total_len.clamp_min(1), torch.zeros_like(total_len))[idx]
    alone = r if group_of_one == "score" else torch.zeros_like(r)
    adv = torch.where(size[idx] > 1, r - baseline, alone).to(scores.dtype)
    adv = broadcast_over_tokens(adv, mask)
    return adv, adv.clone()


@torch.no_grad()
def compute_gdpo(parts: Tensor, weights: Sequence[float], mask: Tensor, group_ids: Sequence,
                 norm_by_std: bool = True, eps: float = 1e-6, group_of_one: str = "zero") -> tuple[Tensor, Tensor]:
    """GDPO advantage. parts (B, K): each reward component's raw score; weights (K,)."""
    if parts.dim() != 2 or parts.shape[1] != len(weights):
        raise ValueError(f"gdpo: reward parts {tuple(parts.shape)} do not match {len(weights)} weights")
    total = torch.zeros_like(mask, dtype=torch.float32)
    for k, w in enumerate(weights):
        adv_k, _ = compute_grpo(parts[:, k].float(), mask, group_ids, norm_by_std=norm_by_std, eps=eps,
                                group_of_one=group_of_one)
        total = total + float(w) * adv_k
    adv = masked_whiten(total, mask)
    return adv, adv.clone()


@torch.no_grad()
def compute_optimal_token_baseline(token_rewards: Tensor, mask: Tensor, group_ids: Sequence, old_log_probs: Tensor,
                                   sum_pi_squared: Tensor, is_weights: Optional[Tensor] = None,
                                   handle_zero_tail: bool = True, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """OTB (module docstring). token_rewards, old_log_probs, sum_pi_squared, is_weights: (B, R).
    Returns (advantages, returns G)."""
    mask = mask.to(token_rewards.dtype)
    returns = (token_rewards * mask).flip(-1).cumsum(-1).flip(-1)  # (B, R) G_t
    w = 1.0 - 2.0 * torch.exp(old_log_probs) + sum_pi_squared
    if is_weights is not None:  # truncated IS: W scaled by rho^2 (the MSE-optimal weighting)
        w = w * is_weights ** 2
    w_cum = (w * mask).cumsum(-1)  # (B, R) W_t
    baseline = torch.zeros_like(returns)
    idx, num_groups = group_index(group_ids)
    for g in range(num_groups):
        rows = torch.nonzero(idx == g, as_tuple=True)[0].to(returns.device)
        if len(rows) < 2:
            continue  # alone: no baseline, the advantage is the return
        m, wc = mask[rows], w_cum[rows]
        b = (returns[rows] * wc * m).sum(0) / ((wc * m).sum(0) + eps)  # (R,)
        baseline[rows] = b.expand(len(rows), -1)
        if handle_zero_tail:
            lengths = m.sum(-1)
            top2 = torch.topk(lengths, 2).values
            longest = torch.nonzero(lengths == top2[0], as_tuple=True)[0]
            if len(longest) == 1 and top2[0] > top2[1]:
                baseline[rows[longest[0]], int(top2[1]):] = 0.0
    return (returns - baseline) * mask, returns


@estimator("gpg", compares_group=True)
def _gpg(x: AdvantageInputs):
    return compute_gpg(x.need("scores"), x.mask, x.need("group_ids"), norm_by_std=x.norm_adv_by_std,
                       alpha_count=x.gpg_alpha, group_of_one=x.group_of_one)


@estimator("opo", compares_group=True)
def _opo(x: AdvantageInputs):
    return compute_opo(x.need("scores"), x.mask, x.need("group_ids"), group_of_one=x.group_of_one)


@estimator("gdpo", compares_group=True, reads_reward_parts=True)
def _gdpo(x: AdvantageInputs):
    return compute_gdpo(x.need("reward_parts"), x.need("reward_weights"), x.mask, x.need("group_ids"),
                        norm_by_std=x.norm_adv_by_std, group_of_one=x.group_of_one)


@estimator("optimal_token_baseline", compares_group=True, needs_sum_pi_squared=True)
def _optimal_token_baseline(x: AdvantageInputs):
    return compute_optimal_token_baseline(x.need("token_rewards"), x.mask, x.need("group_ids"),
                                          x.need("old_log_probs"), x.need("sum_pi_squared"), x.is_weights)
