"""`algorithm.name` presets: sensible combinations of estimator, loss and KL placement, as
partial `algorithm` sections.

A preset only fills keys the user left unset (None), so `algorithm.name: grpo` plus
`algorithm.loss_agg_mode: seq-mean-token-mean` keeps the user's choice; keys neither set take
the defaults declared on AlgorithmConfig (verl/config/algorithm.py applies both, before the
config is checked).
"""

from __future__ import annotations


_DAPO_EXTRAS = dict(dynamic_sampling={"enable": True}, overlong_penalty={"enable": True})

_NO_KL = dict(use_kl_in_reward=False, use_kl_loss=False)

PRESETS: dict[str, dict] = {
    # PPO (Schulman et al. 2017; Ouyang et al. 2022): GAE with a critic, KL penalty in the reward.
    "ppo": dict(adv_estimator="gae", policy_loss="ppo", use_kl_in_reward=True, kl_coef=0.05,
                kl_estimator="k1", use_kl_loss=False, loss_agg_mode="token-mean"),
    # GRPO (Shao et al. 2024): group-normalised outcome reward, KL as a k3 loss term.
    "grpo": dict(adv_estimator="grpo", policy_loss="ppo", use_kl_in_reward=False, use_kl_loss=True,
                 kl_loss_coef=0.001, kl_estimator="k3", norm_adv_by_std_in_grpo=True,
                 loss_agg_mode="token-mean"),
    # Dr. GRPO (Liu et al. 2025): no std division, no length normalisation, no KL.
    "dr_grpo": dict(adv_estimator="dr_grpo", policy_loss="ppo", norm_adv_by_std_in_grpo=False,
                    loss_agg_mode="seq-mean-token-sum-norm", kl_estimator="k3", **_NO_KL),
    # RLOO (Ahmadian et al. 2024): leave-one-out baseline, KL in the reward.
    "rloo": dict(adv_estimator="rloo", policy_loss="ppo", use_kl_in_reward=True, kl_coef=0.05,
                 kl_estimator="k1", use_kl_loss=False, loss_agg_mode="token-mean"),
    # REINFORCE++ (Hu 2025): token-level KL in the reward, discounted returns, batch whitening.
    "reinforce_pp": dict(adv_estimator="reinforce_pp", policy_loss="ppo", use_kl_in_reward=True,
                         kl_coef=0.01, kl_estimator="k1", use_kl_loss=False, loss_agg_mode="token-mean"),
    # REINFORCE++-baseline: group-mean baseline, then batch whitening; KL as a k3 loss.
    "reinforce_pp_baseline": dict(adv_estimator="reinforce_pp_baseline", policy_loss="ppo",
                                  use_kl_in_reward=False, use_kl_loss=True, kl_loss_coef=0.001,
                                  kl_estimator="k3", loss_agg_mode="token-mean"),
    # ReMax (Li et al. 2023): the greedy response's reward is the baseline.
    "remax": dict(adv_estimator="remax", policy_loss="ppo", use_kl_in_reward=True, kl_coef=0.05,
                  kl_estimator="k1", use_kl_loss=False, loss_agg_mode="token-mean"),
    # DAPO (Yu et al. 2025): clip-higher, token-level loss, dynamic sampling, overlong shaping, no KL.
    "dapo": dict(adv_estimator="grpo", policy_loss="ppo", norm_adv_by_std_in_grpo=True,
                 loss_agg_mode="token-mean", kl_estimator="k3", clip_ratio_high=0.28, **_NO_KL, **_DAPO_EXTRAS),
    # GSPO (Zheng et al. 2025): sequence-level importance ratio with tight clipping.
    "gspo": dict(adv_estimator="grpo", policy_loss="gspo", norm_adv_by_std_in_grpo=True,
                 loss_agg_mode="seq-mean-token-mean", kl_estimator="k3", clip_ratio_low=3e-4,
                 clip_ratio_high=4e-4, **_NO_KL),
}
