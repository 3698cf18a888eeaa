"""Turning sequence-level scores into the token-level quantities the losses need.

Pure functions of a Batch (they read it and write nothing): where the reward sits, KL in the reward,
advantages. `advantage_values` returns an AdvantageValues record; the trainer's advantages stage puts
its tensors into the batch the updates read.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from verl.algorithms.advantages import ESTIMATORS, compute_advantages
from verl.algorithms.kl import apply_kl_in_reward, kl_penalty
from verl.algorithms.masked import masked_mean, masked_whiten
from verl.batch import Batch


def last_token_index(response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) index of each response's last counted token (0 for an empty response)."""
    r = response_mask.shape[1]
    positions = torch.arange(r).expand_as(response_mask)
    return torch.where(response_mask > 0, positions, torch.zeros_like(positions)).max(dim=1).values


def place_on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) scores -> (B, R) with each score on its response's last counted token.

    Outcome rewards arrive once the answer is complete; GAE then propagates them back.
    """
    out = torch.zeros_like(response_mask, dtype=torch.float32)
    out.scatter_(1, last_token_index(response_mask).unsqueeze(1), scores.float().unsqueeze(1))
    return out * (response_mask.sum(dim=1, keepdim=True) > 0)


class AdvantageValues(NamedTuple):
    """The advantages stage's values, each (B, R) float32 but the metrics."""

    token_level_scores: torch.Tensor   # the sequence scores on their last counted token
    token_level_rewards: torch.Tensor  # the same minus the KL penalty where it is in the reward
    advantages: torch.Tensor
    returns: torch.Tensor
    metrics: dict                      # actor/advantage_mean, and the in-reward KL and coefficient


def advantage_values(batch: Batch, algorithm_cfg, kl_coef: float, reward_weights: Optional[list] = None,
                     score_mask=None) -> AdvantageValues:
    """token_level_scores/rewards, advantages and returns of `batch`.

    token_level_rewards = scores on the last token - kl_coef * KL(old || ref) per token
    (when use_kl_in_reward); outcome estimators use its per-sequence sum. `reward_weights`:
    the reward components' weights, for the estimators that read batch.reward_parts (gdpo).
    `score_mask` (B, R): the response mask before the rollout correction rejected tokens (None: the
    batch's), on which the scores are placed and the KL penalty is taken.
    """
    a = algorithm_cfg
    mask = batch.response_mask
    # the rewards sit on the response before the rollout correction's rejection (real verl's order:
    # reward and KL penalty, then rejection, then the estimator over the tokens that remain)
    score_mask = mask if score_mask is None else score_mask
    metrics = {}
    token_scores = place_on_last_token(batch.scores, score_mask)
    if a.use_kl_in_reward:
        token_rewards, mean_kl = apply_kl_in_reward(
            token_scores, batch.old_log_probs, batch.ref_log_probs, score_mask, kl_coef, a.kl_estimator)
        metrics["actor/kl_in_reward"] = float(mean_kl)
        metrics["actor/kl_coef"] = kl_coef
    else:
        token_rewards = token_scores
    advantages, returns = compute_advantages(
        a.adv_estimator, token_rewards=token_rewards, values=batch.values,
        scores=token_rewards.sum(dim=1), baseline_scores=batch.baseline_scores, mask=mask,
        group_ids=batch.group_id, gamma=a.gamma, lam=a.lam, norm_adv_by_std=a.norm_adv_by_std_in_grpo,
        gpg_alpha=a.gpg_alpha, group_of_one=a.group_of_one,
        reward_parts=batch.reward_parts, reward_weights=reward_weights, old_log_probs=batch.old_log_probs,
        sum_pi_squared=batch.sum_pi_squared, is_weights=batch.is_weights)
    if ESTIMATORS[a.adv_estimator].whiten:  # gae: PPO normalises advantages per batch
        advantages = masked_whiten(advantages, mask)
    metrics["actor/advantage_mean"] = float(masked_mean(advantages, mask))
    return AdvantageValues(token_scores, token_rewards, advantages, returns, metrics)


def policy_kl(batch: Batch) -> float:
    """Mean per-token KL(pi_old || pi_ref) over counted tokens: the seed's `kl`.

    Uses the k3 estimator (unbiased like k1, but never negative and lower variance), so
    the monitored number reads like a divergence whatever estimator the loss uses."""
    if batch.ref_log_probs is None or batch.response_mask.sum() == 0:
        return 0.0
    return float(masked_mean(kl_penalty(batch.old_log_probs, batch.ref_log_probs, "k3"), batch.response_mask))
