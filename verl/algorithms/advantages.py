"""Advantage estimators. Each returns (advantages (B, R), returns (B, R)), both 0 where the
mask is 0, computed without gradient.

Token-level estimators (gae, reinforce_pp) walk the response backwards over VALID tokens
only: a token with mask 0 (padding, or tool output inside a multi-turn response) is skipped,
so the "next" token of a valid token is the next valid one. A reward placed on a masked
position is ignored; put each sequence's score on its last valid token.

Outcome/group estimators take `scores` (B,) = the sequence's total reward (the caller passes
sum_t token_rewards) and broadcast one advantage over the sequence's valid tokens. For them
`returns` equals `advantages` (there is no critic to regress).

Group ids: samples generated from the same prompt share a group id (any hashable value).

The table ESTIMATORS (filled by @estimator below) is the one list of `algorithm.adv_estimator`
names: the config takes its choices from it, and each entry says what the estimator needs
(a critic, a group of samples per prompt, a greedy baseline rollout). Adding an estimator is
one decorated function here (and its test):

    @estimator("my_est", compares_group=True)
    def _my_est(x: AdvantageInputs):
        return compute_my_est(x.need("scores"), x.mask, x.need("group_ids"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from verl.algorithms.masked import group_stats, masked_whiten

Tensor = torch.Tensor


def broadcast_over_tokens(per_seq: Tensor, mask: Tensor) -> Tensor:
    """(B,) -> (B, R): the sequence's value on its valid tokens, 0 elsewhere."""
    mask = mask.to(per_seq.dtype)
    return per_seq[:, None] * mask


@torch.no_grad()
def compute_gae(token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, "High-Dimensional Continuous
    Control Using Generalized Advantage Estimation"), over valid tokens only:

        delta_t = r_t + gamma * V(s_next(t)) - V(s_t)
        A_t     = delta_t + gamma * lam * A_next(t)
        R_t     = A_t + V(s_t)                       (critic target)

    next(t) is the next token with mask 1 after t; after the last valid token V = 0 and A = 0
    (end of episode). No whitening here; the caller may whiten.
    token_rewards, values, mask: (B, R).
    """
    mask = mask.to(values.dtype)
    B, R = values.shape
    next_value = values.new_zeros(B)  # (B,) V at the next valid token
    next_adv = values.new_zeros(B)  # (B,) A at the next valid token
    adv = torch.zeros_like(values)
    for t in reversed(range(R)):
        m = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        valid = m != 0
        adv[:, t] = torch.where(valid, a_t, torch.zeros_like(a_t))
        # a masked token leaves the carry untouched: it is invisible to the recursion
        next_value = torch.where(valid, values[:, t], next_value)
        next_adv = torch.where(valid, a_t, next_adv)
    returns = torch.where(mask != 0, adv + values, torch.zeros_like(adv))
    return adv, returns


@torch.no_grad()
def discounted_returns(token_rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """Return-to-go over valid tokens: G_t = r_t + gamma * G_next(t), 0 on masked tokens. (B, R)"""
    mask = mask.to(token_rewards.dtype)
    B, R = token_rewards.shape
    running = token_rewards.new_zeros(B)
    out = torch.zeros_like(token_rewards)
    for t in reversed(range(R)):
        valid = mask[:, t] != 0
        g = token_rewards[:, t] + gamma * running
        running = torch.where(valid, g, running)
        out[:, t] = torch.where(valid, g, torch.zeros_like(g))
    return out


@torch.no_grad()
def compute_grpo(
    scores: Tensor, mask: Tensor, group_ids: Sequence, norm_by_std: bool = True, eps: float = 1e-6,
    group_of_one: str = "zero",
) -> tuple[Tensor, Tensor]:
    """GRPO outcome advantage (Shao et al. 2024, "DeepSeekMath", section 4.1.2):

        A_i = (r_i - mean_{g(i)} r) / (std_{g(i)} r + eps)     (norm_by_std)
        A_i =  r_i - mean_{g(i)} r                              (Dr. GRPO, Liu et al. 2025)

    std is the unbiased sample std of the group. A sequence alone in its group gets 0 (group_of_one
    "zero": nothing to compare it with), or is taken with mean 0 and std 1 ("score", real verl's
    rule): r_i / (1 + eps) with norm_by_std, r_i without.
    scores (B,), mask (B, R) -> A_i broadcast over sequence i's valid tokens.
    """
    size, mean, std = group_stats(scores, group_ids)  # each (B,)
    alone = size <= 1
    if group_of_one == "score":
        mean = torch.where(alone, torch.zeros_like(mean), mean)
        std = torch.where(alone, torch.ones_like(std), std)
    adv = scores - mean
    if norm_by_std:
        adv = adv / (std + eps)
    if group_of_one == "zero":
        adv = torch.where(alone, torch.zeros_like(adv), adv)
    adv = broadcast_over_tokens(adv, mask)
    return adv, adv.clone()


@torch.no_grad()
def compute_rloo(scores: Tensor, mask: Tensor, group_ids: Sequence,
                 group_of_one: str = "zero") -> tuple[Tensor, Tensor]:
    """REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics"):

        A_i = r_i - (1 / (n - 1)) sum_{j in g(i), j != i} r_j  =  n / (n - 1) * (r_i - mean_g r)

    with n = |g(i)|; a sequence alone in its group gets 0, or r_i with group_of_one "score" (no one to
    leave out: baseline 0, real verl's rule). Broadcast over valid tokens.
    """
    size, mean, _ = group_stats(scores, group_ids)
    n = size
    loo_mean = (n * mean - scores) / (n - 1).clamp_min(1)  # mean of the other n-1 samples
    alone = scores if group_of_one == "score" else torch.zeros_like(scores)
    adv = torch.where(n > 1, scores - loo_mean, alone)
    adv = broadcast_over_tokens(adv, mask)
    return adv, adv.clone()


@torch.no_grad()
def compute_reinforce_pp(token_rewards: Tensor, mask: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning LLMs"):

        G_t = sum_{k >= t, valid} gamma^(k - t) r_k      (return-to-go over valid tokens)
        A   = whiten(G) over all valid tokens of the batch

    Returns (A, G): the critic-free target G is returned as `returns`.
    """
    returns = discounted_returns(token_rewards, mask, gamma)
    return masked_whiten(returns, mask), returns


@torch.no_grad()
def compute_reinforce_pp_baseline(scores: Tensor, mask: Tensor, group_ids: Sequence,
                                  group_of_one: str = "zero") -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (Hu 2025): subtract the group mean, broadcast over the sequence,
    then whiten over all valid tokens of the batch:

        A = whiten_batch( (r_i - mean_{g(i)} r) * m[i, t] )

    A sequence alone in its group is its own mean (0 before whitening), or has mean 0 with
    group_of_one "score" (real verl's rule: r_i before whitening).
    """
    size, mean, _ = group_stats(scores, group_ids)
    if group_of_one == "score":
        mean = torch.where(size <= 1, torch.zeros_like(mean), mean)
    adv = broadcast_over_tokens(scores - mean, mask)
    adv = masked_whiten(adv, mask)
    return adv, adv.clone()


@torch.no_grad()
def compute_remax(scores: Tensor, baseline_scores: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """ReMax (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient RL Method for LLMs"):
    the reward of the greedy response to the same prompt is the baseline,

        A_i = r_i - r_i^greedy, broadcast over valid tokens.
    """
    adv = broadcast_over_tokens(scores - baseline_scores, mask)
    return adv, adv.clone()


@dataclass
class AdvantageInputs:
    """What an estimator may read; `need(name)` returns a field or names the missing one."""

    estimator: str
    mask: Tensor
    token_rewards: Optional[Tensor] = None
    values: Optional[Tensor] = None
    scores: Optional[Tensor] = None
    baseline_scores: Optional[Tensor] = None
    group_ids: Optional[Sequence] = None
    reward_parts: Optional[Tensor] = None  # (B, K) each reward component's raw score (gdpo)
    reward_weights: Optional[Sequence[float]] = None  # (K,) their weights
    old_log_probs: Optional[Tensor] = None  # (B, R) log pi_old of the sampled tokens
    sum_pi_squared: Optional[Tensor] = None  # (B, R) sum_v pi_old(v)^2 at each position
    is_weights: Optional[Tensor] = None  # (B, R) the rollout correction's weights (optimal_token_baseline reads them)
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std: bool = True
    gpg_alpha: str = "valid"  # gpg's alpha count: valid | nonzero (compute_gpg)
    group_of_one: str = "zero"  # a sample alone in its group: zero | score (compute_grpo)

    def need(self, name: str):
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"advantage estimator '{self.estimator}' needs `{name}`, which was not given")
        return value


@dataclass(frozen=True)
class Estimator:
    """One `algorithm.adv_estimator`. compares_group: compares the n samples of a prompt (needs
    rollout.n >= 2, default n 4); needs_critic: reads values V(s_t); greedy_baseline: needs the
    reward of the greedy answer to each prompt (an extra rollout); whiten: advantages are
    normalised over the batch afterwards; reads_reward_parts: reads each reward component's
    score (the batch keeps them); needs_sum_pi_squared: reads sum_v pi_old(v)^2 per token (the
    actor's log-prob pass computes it, and pi_old cannot come from the update's forward)."""

    name: str
    fn: Callable[[AdvantageInputs], tuple[Tensor, Tensor]]
    compares_group: bool = False
    needs_critic: bool = False
    greedy_baseline: bool = False
    whiten: bool = False
    reads_reward_parts: bool = False
    needs_sum_pi_squared: bool = False


ESTIMATORS: dict[str, Estimator] = {}


def estimator(name: str, **traits):
    """Register the decorated `fn(AdvantageInputs) -> (advantages, returns)` as estimator `name`."""
    def register(fn):
        ESTIMATORS[name] = Estimator(name, fn, **traits)
        return fn
    return register


@estimator("gae", needs_critic=True, whiten=True)  # PPO normalises GAE advantages per batch
def _gae(x: AdvantageInputs):
    return compute_gae(x.need("token_rewards"), x.need("values"), x.mask, x.gamma, x.lam)


@estimator("reinforce_pp")
def _reinforce_pp(x: AdvantageInputs):
    return compute_reinforce_pp(x.need("token_rewards"), x.mask, x.gamma)


@estimator("grpo", compares_group=True)
def _grpo(x: AdvantageInputs):
    return compute_grpo(x.need("scores"), x.mask, x.need("group_ids"), norm_by_std=x.norm_adv_by_std,
                        group_of_one=x.group_of_one)


@estimator("dr_grpo", compares_group=True)
def _dr_grpo(x: AdvantageInputs):  # never divides by std
    return compute_grpo(x.need("scores"), x.mask, x.need("group_ids"), norm_by_std=False, group_of_one=x.group_of_one)


@estimator("rloo", compares_group=True)
def _rloo(x: AdvantageInputs):
    return compute_rloo(x.need("scores"), x.mask, x.need("group_ids"), group_of_one=x.group_of_one)


@estimator("reinforce_pp_baseline", compares_group=True)
def _reinforce_pp_baseline(x: AdvantageInputs):
    return compute_reinforce_pp_baseline(x.need("scores"), x.mask, x.need("group_ids"), group_of_one=x.group_of_one)


@estimator("remax", greedy_baseline=True)
def _remax(x: AdvantageInputs):
    return compute_remax(x.need("scores"), x.need("baseline_scores"), x.mask)


# gpg, opo, gdpo, optimal_token_baseline register themselves (after the table and helpers above).
from verl.algorithms import group_baselines  # noqa: E402,F401

ADV_ESTIMATORS = tuple(ESTIMATORS)
GROUP_ESTIMATORS = tuple(name for name, e in ESTIMATORS.items() if e.compares_group)


@torch.no_grad()
def compute_advantages(estimator: str, *, mask: Tensor, **inputs) -> tuple[Tensor, Tensor]:
    """Advantages and returns by estimator name (algorithm.adv_estimator). `inputs`: the
    AdvantageInputs fields it reads (the caller whitens when ESTIMATORS[name].whiten)

    gae: token_rewards, values, gamma, lam      reinforce_pp: token_rewards, gamma
    grpo: scores, group_ids, norm_adv_by_std    dr_grpo: scores, group_ids (never divides by std)
    rloo / reinforce_pp_baseline: scores, group_ids     remax: scores, baseline_scores
    gpg / opo: scores, group_ids (gpg: norm_adv_by_std)  gdpo: reward_parts, reward_weights, group_ids
    optimal_token_baseline: token_rewards, group_ids, old_log_probs, sum_pi_squared
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"advantage estimator '{estimator}' is not one of {', '.join(ADV_ESTIMATORS)}")
    return ESTIMATORS[estimator].fn(AdvantageInputs(estimator, mask, **inputs))
