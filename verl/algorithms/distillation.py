"""On-policy distillation loss: a per-token KL of the student to the teacher on the student's own samples.

    d_t = kl_est(log q(y_t), log p(y_t))      q: the student (the policy being trained), p: the teacher,
                                              y_t: the token the student sampled, kl_est one of
                                              k1 = log q - log p,   k2 = (log q - log p)^2 / 2,
                                              abs = |log q - log p|, k3 = p/q - 1 - log(p/q)
                                              (verl.algorithms.kl.kl_penalty, clamped as there)

Each is an estimator of the reverse KL(q || p) from samples of q (Agarwal et al. 2024, "On-Policy
Distillation of Language Models"; Thinking Machines 2025, "On-Policy Distillation"). Two ways into the
update (real verl's `distillation_loss.use_policy_gradient`):

    direct            L_distill = aggregate(d_t)            its gradient through log q (k2, k3, abs)
    policy gradient   L_distill = clipped PG loss with advantage A_t = -d_t (detached), so tokens the teacher
                      finds likelier than the student does are reinforced (k1 works here)

aggregated like the policy loss (algorithm.loss_agg_mode). With the task reward the update minimises
L_task + coef x L_distill; without it L_distill alone.
"""

from __future__ import annotations

from typing import Optional

import torch

from verl.algorithms.kl import kl_penalty

Tensor = torch.Tensor


def distillation_token_losses(student_log_probs: Tensor, teacher_log_probs: Tensor, mode: str = "k3",
                              max_clamp: Optional[float] = None) -> Tensor:
    """d_t (B, R) of the module docstring; gradients flow through `student_log_probs` only."""
    d = kl_penalty(student_log_probs, teacher_log_probs.detach(), mode)
    return d.clamp(-max_clamp, max_clamp) if max_clamp is not None else d
