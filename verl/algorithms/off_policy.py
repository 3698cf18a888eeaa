"""Importance correction between the policy that sampled a token (the engine, possibly some
updates old) and the policy the loss is taken against (pi_old, recomputed by the actor).

    w_t = pi_old(y_t) / pi_behaviour(y_t) = exp(log pi_old - log pi_behaviour)

    truncate (TIS):  w_t <- min(w_t, cap)                        every token kept, large weights capped
    mask (MIS):      w_t <- 1 if 1/cap <= w_t <= cap, else 0     tokens the policies disagree on are dropped

The weight multiplies each token's policy-gradient term (verl.algorithms.policy_losses,
`is_weights`). Tokens with mask 0 are ignored in the statistics.
"""

from __future__ import annotations

import torch

from verl.algorithms.masked import masked_mean

IS_MODES = ("truncate", "mask")


@torch.no_grad()
def importance_weights(old_log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor, mask: torch.Tensor,
                       mode: str = "truncate", cap: float = 2.0) -> tuple[torch.Tensor, dict]:
    """(B, R) weights and their statistics: the raw ratio's mean / max / min over counted tokens,
    and the share of those tokens whose weight was changed (capped, or masked to 0)."""
    if mode not in IS_MODES:
        raise ValueError(f"importance-sampling mode '{mode}' is not one of {', '.join(IS_MODES)}")
    ratio = torch.exp((old_log_probs - behaviour_log_probs).clamp(-20.0, 20.0))
    counted = mask > 0
    if mode == "truncate":
        weights = ratio.clamp(max=cap)
        changed = ratio > cap
    else:
        keep = (ratio >= 1.0 / cap) & (ratio <= cap)
        weights = keep.to(ratio.dtype)
        changed = ~keep
    if counted.any():
        stats = {"ratio_mean": float(masked_mean(ratio, mask)), "ratio_max": float(ratio[counted].max()),
                 "ratio_min": float(ratio[counted].min()), "changed_frac": float(masked_mean(changed.float(), mask))}
    else:
        stats = {"ratio_mean": 1.0, "ratio_max": 1.0, "ratio_min": 1.0, "changed_frac": 0.0}
    return weights, stats


@torch.no_grad()
def engine_kl(actor_log_probs: torch.Tensor, engine_log_probs: torch.Tensor, mask: torch.Tensor) -> float:
    """KL(pi_engine || pi_actor) on the engine's sampled tokens, by the k3 estimator (Schulman 2020):

        log r_t = log pi_actor(y_t) - log pi_engine(y_t),    kl = mean_t (r_t - 1 - log r_t)   (masked mean)

    Each term is >= 0 and the mean is unbiased for the KL since y_t ~ pi_engine (E[r_t] = 1). Real verl logs
    the same figure as rollout_corr/k3_kl. 0.0 where the mask counts no token."""
    log_r = (actor_log_probs.float() - engine_log_probs.float()).clamp(-20.0, 20.0)
    if not (mask > 0).any():
        return 0.0
    return float(masked_mean(torch.exp(log_r) - 1.0 - log_r, mask))
