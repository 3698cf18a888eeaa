"""`algorithm.name` presets: sensible combinations of estimator, loss and KL placement.

A preset only fills keys the user left unset (None), so `algorithm.name: grpo` plus
`algorithm.loss_agg_mode: seq-mean-token-mean` keeps the user's choice.
"""

from __future__ import annotations

# Estimators that compare the n samples of one prompt (need rollout.n >= 2).
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline")

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
                 loss_agg_mode="token-mean", kl_estimator="k3", clip_ratio_high=0.28, **_NO_KL),
    # GSPO (Zheng et al. 2025): sequence-level importance ratio with tight clipping.
    "gspo": dict(adv_estimator="grpo", policy_loss="gspo", norm_adv_by_std_in_grpo=True,
                 loss_agg_mode="seq-mean-token-mean", kl_estimator="k3", clip_ratio_low=3e-4,
                 clip_ratio_high=4e-4, **_NO_KL),
}

# Keys whose dataclass default is not None but which a preset may still set, and the
# dataclass default that means "the user did not touch it".
_NON_NONE_DEFAULTS = {"clip_ratio_low": 0.2}
_DAPO_SWITCHES = ("dynamic_sampling", "overlong_penalty")


def apply_preset(algo) -> None:
    """Fill unset (None) keys of an AlgorithmConfig from its preset, then generic defaults."""
    preset = PRESETS[algo.name]
    for key, value in preset.items():
        if key in _NON_NONE_DEFAULTS:
            if getattr(algo, key) == _NON_NONE_DEFAULTS[key]:
                setattr(algo, key, value)
        elif getattr(algo, key) is None:
            setattr(algo, key, value)
    for switch in _DAPO_SWITCHES:  # DAPO's two extras are part of its recipe, off elsewhere
        section = getattr(algo, switch)
        if section.enable is None:
            section.enable = algo.name == "dapo"
    generic = dict(kl_coef=0.0, kl_loss_coef=0.0, use_kl_in_reward=False, use_kl_loss=False,
                   kl_estimator="k1", norm_adv_by_std_in_grpo=True, policy_loss="ppo",
                   loss_agg_mode="token-mean")
    for key, value in generic.items():
        if getattr(algo, key) is None:
            setattr(algo, key, value)
