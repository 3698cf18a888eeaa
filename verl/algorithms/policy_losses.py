"""Policy-gradient losses (to MINIMISE): per-token surrogate, then `aggregate_loss`.

Sign convention: advantages > 0 mean "make this token more likely"; the returned loss
is the negated surrogate objective, so gradient descent on it raises pi(token) where A > 0.
rho_t = exp(logp_t - old_t) is the token's importance ratio.

  ppo        Schulman et al. 2017 ("Proximal Policy Optimization Algorithms"), with
             asymmetric bounds (DAPO's clip-higher, Yu et al. 2025) and optional dual clip
             (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"):
                 L_t   = max(-A_t rho_t, -A_t clip(rho_t, 1 - eps_low, 1 + eps_high))
                 if c > 1 and A_t < 0:  L_t = min(L_t, -c A_t)
  gspo       Zheng et al. 2025 ("Group Sequence Policy Optimization"), GSPO-token form:
                 s_i    = exp( (1/|y_i|) sum_t m_t (logp_t - old_t) )        (sequence ratio)
                 s_i,t  = sg[s_i] * exp(logp_t - sg[logp_t])                  (value s_i,
                          gradient s_i * grad logp_t), then clipped like ppo with s_i,t,
                          with no dual clip (the paper has none; real verl's gspo reads no
                          clip_ratio_c): A = -1, s_i = e^3 on 3 tokens gives L = e^3 = 20.09 and
                          d L / d logp_t = e^3 / 3 = 6.70 per token (token-mean).
  reinforce  L_t = -A_t logp_t (Williams 1992). Its gradient equals ppo's at rho = 1, i.e.
             for on-policy, single-epoch updates; no ratio, no clipping.
  gpg        Chu et al. 2025 ("GPG: A Simple and Strong Reinforcement Learning Baseline for
             Model Reasoning"): the plain policy gradient L_t = -A_t logp_t, reinforce's
             formula under GPG's name (pair it with the `gpg` estimator).
  cispo, sapo, geo_mean         policy_losses_ratio.py (reshaped importance ratios)
  clip_cov, kl_cov              policy_losses_cov.py (covariance-selected tokens)

`is_weights` (B, R): optional truncated importance weights min(pi_old / pi_rollout, cap)
(TIS, Yao et al. 2025) that multiply the per-token loss, correcting for the rollout engine's
numerics differing from the trainer's. Treated as constants.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl.algorithms.aggregation import aggregate_loss
from verl.algorithms.masked import masked_mean
from verl.algorithms.policy_loss_base import (
    MAX_LOG_RATIO,
    POLICY_LOSSES,
    PolicyLossInputs,
    clipped_surrogate,
    policy_loss,
    zero_metric,
)

Tensor = torch.Tensor


def _no_clipping(like: Tensor) -> dict:
    zero = zero_metric(like)
    return dict(pg_clipfrac=zero, pg_clipfrac_high=zero, pg_clipfrac_low=zero, pg_clipfrac_lower=zero)


@policy_loss("ppo", dual_clip=True)
def _ppo(x: PolicyLossInputs):
    ratio = torch.exp(x.log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
    return clipped_surrogate(ratio, x.advantages, x.mask, x.clip_low, x.clip_high, x.clip_c)


@policy_loss("gspo")
def _gspo(x: PolicyLossInputs):
    seq_log_ratio = masked_mean(x.log_ratio.detach(), x.mask, dim=-1)  # (B,) log s_i
    # value log s_i on every token; gradient of token t flows only through logp_t
    log_ratio = (seq_log_ratio[:, None] + x.log_probs - x.log_probs.detach()).clamp(max=10.0)  # (B, R)
    return clipped_surrogate(torch.exp(log_ratio), x.advantages, x.mask, x.clip_low, x.clip_high, 0.0)


@policy_loss("gpg")  # GPG's loss is REINFORCE's formula
@policy_loss("reinforce")
def _reinforce(x: PolicyLossInputs):
    return -x.advantages * x.log_probs, _no_clipping(x.log_probs)

# The other families register themselves on import (after the table and helpers above exist).
from verl.algorithms import policy_losses_cov, policy_losses_ratio  # noqa: E402,F401


def compute_policy_loss(
    kind: str,
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = 0.0,
    loss_agg_mode: str = "token-mean",
    num_tokens: Optional[float] = None,
    num_seqs: Optional[int] = None,
    max_response_len: Optional[int] = None,
    is_weights: Optional[Tensor] = None,
    params: Any = None,
) -> tuple[Tensor, dict]:
    """Policy loss (scalar, this micro-batch's share, see `aggregate_loss`) and metrics.

    log_probs (B, R) carry gradient (current policy); old_log_probs, advantages, mask,
    is_weights (B, R) are constants; a loss that reads them itself (`own_is_weights`: geo_mean's geometric
    mean per sequence) gets them in its inputs, the others' per-token loss is multiplied by them. `params`: the losses' own knobs (AlgorithmConfig.loss_params).
    A loss with a fixed aggregation (geo_mean) uses it whatever `loss_agg_mode` says (the config
    refuses the mismatch). Metrics are detached 0-d tensors:
      pg_clipfrac        fraction of valid tokens where a bound was active (clip_cov: tokens detached)
      pg_clipfrac_high   ... the upper bound (A > 0, rho > 1 + high)
      pg_clipfrac_low    ... the lower bound (A < 0, rho < 1 - low)
      pg_clipfrac_lower  ... the dual-clip bound (A < 0, rho > c)
      ppo_kl             mean over valid tokens of old_logp - logp (approx. KL(old || new))
      log_ratio_abs      mean over valid tokens of |logp - old_logp| (0 on-policy: the runtime check,
                         verl/trainer/invariants.py)
    """
    if kind not in POLICY_LOSSES:
        raise ValueError(f"policy loss '{kind}' is not one of {', '.join(POLICY_LOSSES)}")
    loss_fn = POLICY_LOSSES[kind]
    mask = mask.to(log_probs.dtype)
    if clip_ratio_c and not loss_fn.dual_clip:
        raise ValueError(f"policy loss '{kind}' has no dual clip (clip_ratio_c); only ppo's has")
    own = is_weights.detach() if is_weights is not None and loss_fn.own_is_weights else None
    x = PolicyLossInputs(log_probs, old_log_probs.detach(), advantages.detach(), mask, clip_ratio_low,
                         clip_ratio_high, clip_ratio_c, params, own)
    loss_mat, metrics = loss_fn.fn(x)
    metrics = {**_no_clipping(log_probs), **metrics}
    metrics.setdefault("ppo_kl", masked_mean(-x.log_ratio.detach(), mask))
    metrics["log_ratio_abs"] = masked_mean(x.log_ratio.detach().abs(), mask)
    if is_weights is not None and not loss_fn.own_is_weights:
        loss_mat = loss_mat * is_weights.detach()
    loss = aggregate_loss(loss_mat, mask, loss_fn.agg_mode or loss_agg_mode, num_tokens=num_tokens,
                          num_seqs=num_seqs, max_response_len=max_response_len)
    return loss, {k: v.detach() for k, v in metrics.items()}
