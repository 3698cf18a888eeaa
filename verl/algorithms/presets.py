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
    # CISPO (MiniMax-M1, 2025): a clipped, stop-gradient IS weight on every token's log-prob; no
    # lower bound (1 - 1 = 0), the weight capped at 5 (ScaleRL's eps_max; TRL's recommendation).
    "cispo": dict(adv_estimator="grpo", policy_loss="cispo", norm_adv_by_std_in_grpo=True,
                  loss_agg_mode="token-mean", kl_estimator="k3", clip_ratio_low=1.0, clip_ratio_high=4.0, **_NO_KL),
    # SAPO (Gao et al. 2025): a temperature-controlled soft gate instead of the hard clip
    # (tau_pos 1.0 / tau_neg 1.05 in algorithm.loss_params), averaged per sequence.
    "sapo": dict(adv_estimator="grpo", policy_loss="sapo", norm_adv_by_std_in_grpo=True,
                 loss_agg_mode="seq-mean-token-mean", kl_estimator="k3", **_NO_KL),
    # GPG (Chu et al. 2025): the plain policy gradient with a group-mean baseline scaled by
    # B / B_valid, no std division, no KL, no reference; token-level normalisation.
    "gpg": dict(adv_estimator="gpg", policy_loss="gpg", norm_adv_by_std_in_grpo=False,
                loss_agg_mode="token-mean", kl_estimator="k3", **_NO_KL),
    # GMPO (Zhao et al. 2025): the geometric mean of token ratios, clipped at (e^-0.4, e^0.4).
    "gmpo": dict(adv_estimator="grpo", policy_loss="geo_mean", norm_adv_by_std_in_grpo=True,
                 loss_agg_mode="seq-mean-token-mean", kl_estimator="k3", clip_ratio_low=0.4, clip_ratio_high=0.4,
                 **_NO_KL),
    # Clip-Cov / KL-Cov (Cui et al. 2025): GRPO advantages; a few high-covariance tokens lose their
    # gradient (clip_cov) or pay a KL penalty (kl_cov) to keep the entropy from collapsing.
    "clip_cov": dict(adv_estimator="grpo", policy_loss="clip_cov", norm_adv_by_std_in_grpo=True,
                     loss_agg_mode="token-mean", kl_estimator="k3", clip_ratio_low=0.2, clip_ratio_high=0.2,
                     **_NO_KL),
    "kl_cov": dict(adv_estimator="grpo", policy_loss="kl_cov", norm_adv_by_std_in_grpo=True,
                   loss_agg_mode="token-mean", kl_estimator="k3", **_NO_KL),
    # OPO (Hao et al. 2025): the length-weighted optimal baseline; exactly on-policy (keep
    # training.num_epochs 1 and one mini-batch per step), no KL.
    "opo": dict(adv_estimator="opo", policy_loss="ppo", loss_agg_mode="token-mean", kl_estimator="k3", **_NO_KL),
    # GDPO (NVIDIA 2026): GRPO with each reward component normalised on its own (a `combined`
    # reward_fn), then whitened over the batch; GRPO's KL loss.
    "gdpo": dict(adv_estimator="gdpo", policy_loss="ppo", use_kl_in_reward=False, use_kl_loss=True,
                 kl_loss_coef=0.001, kl_estimator="k3", norm_adv_by_std_in_grpo=True, loss_agg_mode="token-mean"),
    # Optimal token baseline (real verl's OTB): a per-token baseline weighted by the path's
    # score-function variance; pi_old is computed before the update (it needs sum pi^2).
    "otb": dict(adv_estimator="optimal_token_baseline", policy_loss="ppo", loss_agg_mode="token-mean",
                kl_estimator="k3", **_NO_KL),
    # LUSPO (2026, TRL's loss_type="luspo"): GSPO's sequence ratio, each sequence's loss summed over
    # its tokens (scaled by its length) instead of averaged, removing GSPO's length bias.
    "luspo": dict(adv_estimator="grpo", policy_loss="gspo", norm_adv_by_std_in_grpo=True,
                  loss_agg_mode="seq-mean-token-sum", kl_estimator="k3", clip_ratio_low=3e-4, clip_ratio_high=4e-4,
                  **_NO_KL),
}
