"""`algorithm` section: the estimator, the policy loss, KL placement and the DAPO extras.

Keys left None are filled by the preset that `algorithm.name` names (verl/algorithms/presets.py,
partial sections), then by the `unset` default declared here (apply_preset), before the
section is checked: a user's explicit value always wins.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, key
from verl.config.rollout_correction import RolloutCorrectionConfig
from verl.errors import ConfigError


@dataclass
class KLControlConfig(Section):
    SECTION = "algorithm.kl_ctrl"
    type: str = key("fixed", choices=("fixed", "adaptive"))
    target_kl: float = 0.1
    horizon: int = key(10000, gt=0)


@dataclass
class DynamicSamplingConfig(Section):
    SECTION = "algorithm.dynamic_sampling"
    enable: Optional[bool] = key(None, unset=False)  # None -> on for the dapo preset, off otherwise
    max_rounds: int = 4  # extra generation rounds before giving up filling the batch


@dataclass
class OverlongPenaltyConfig(Section):
    SECTION = "algorithm.overlong_penalty"
    enable: Optional[bool] = key(None, unset=False)  # None -> on for the dapo preset, off otherwise
    buffer_len: int = 8  # penalty ramps over the last `buffer_len` tokens before the max
    penalty_factor: float = 1.0


@dataclass
class PfPpoConfig(Section):
    """Preference-feedback PPO (real verl's algorithm.use_pf_ppo / pf_ppo.*): after GAE's advantages the batch is
    resampled with replacement, weighted by each sequence's score (verl/algorithms/pf_ppo.py has the formulas)."""
    SECTION = "algorithm.pf_ppo"
    enable: bool = False
    reweight_method: str = key("pow", choices="verl.algorithms.pf_ppo:REWEIGHT_METHODS")
    weight_pow: float = key(2.0, ge=0)  # pow: w = |score| ** weight_pow


@dataclass
class LossParamsConfig(Section):
    """The knobs of individual policy losses (verl/algorithms/policy_losses_*.py), papers' defaults."""
    SECTION = "algorithm.loss_params"
    tau_pos: float = key(1.0, gt=0)  # sapo: gate temperature where A > 0 (Gao et al. 2025)
    tau_neg: float = key(1.05, gt=0)  # sapo: where A <= 0
    clip_cov_ratio: float = key(2e-4, gt=0, unit="(0, 1]")  # clip_cov: share of tokens held back
    clip_cov_lb: float = 1.0  # clip_cov: covariance window (lb, ub) of the candidates
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = key(2e-4, gt=0, unit="(0, 1]")  # kl_cov: share of tokens with the KL penalty
    ppo_kl_coef: float = key(1.0, ge=0)  # kl_cov: coefficient of |logp - old| on them

    def validate(self, path: str) -> None:
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ConfigError(f"{path}.clip_cov_lb ({self.clip_cov_lb}) must be below clip_cov_ub ({self.clip_cov_ub})")


@dataclass
class AlgorithmConfig(Section):
    SECTION = "algorithm"
    # Preset that fills the keys below which the user did not set (verl/algorithms/presets.py)
    name: str = key("ppo", choices="verl.algorithms.presets:PRESETS")
    adv_estimator: Optional[str] = key(None, choices="verl.algorithms.advantages:ESTIMATORS")
    gamma: float = key(1.0, unit="[0, 1]")
    lam: float = key(0.95, unit="[0, 1]")
    # KL to the reference policy
    kl_coef: Optional[float] = key(None, ge=0, unset=0.0)  # coefficient when KL is in the reward
    use_kl_in_reward: Optional[bool] = key(None, unset=False)
    kl_ctrl: KLControlConfig = key(factory=KLControlConfig)
    use_kl_loss: Optional[bool] = key(None, unset=False)
    kl_loss_coef: Optional[float] = key(None, ge=0, unset=0.0)
    kl_estimator: Optional[str] = key(None, choices="verl.algorithms.kl:KL_ESTIMATORS", unset="k1")
    entropy_coeff: float = key(0.0, ge=0)
    # Policy loss
    policy_loss: Optional[str] = key(None, choices="verl.algorithms.policy_losses:POLICY_LOSSES", unset="ppo")
    clip_ratio_low: Optional[float] = key(None, gt=0, unset=0.2)
    clip_ratio_high: Optional[float] = key(None, gt=0)  # None -> clip_ratio_low (symmetric)
    clip_ratio_c: float = 0.0  # dual-clip lower bound for negative advantages (ppo's loss only); 0 = off
    # geo_mean and sapo aggregate their own term per sequence; loss_agg_mode (unset: the same) then
    # aggregates their KL and entropy terms
    loss_agg_mode: Optional[str] = key(None, choices="verl.algorithms.aggregation:LOSS_AGG_MODES",
                                       unset="token-mean")
    loss_params: LossParamsConfig = key(factory=LossParamsConfig)
    norm_adv_by_std_in_grpo: Optional[bool] = key(None, unset=True)
    # gpg's alpha = B / count: valid = the samples of groups whose rewards differ (the paper's B - M);
    # nonzero = the samples with a nonzero reward (real verl's, which main_ppo sets)
    gpg_alpha: str = key("valid", choices=("valid", "nonzero"))
    # A sample alone in its group (rollout.n 1) under a group estimator: zero = advantage 0 (nothing to
    # compare it with; n 1 is then refused, as nothing would train); score = baseline 0 (std 1), its raw
    # reward as the advantage: real verl's rule, which main_ppo sets
    group_of_one: str = key("zero", choices=("zero", "score"))
    # Value side
    cliprange_value: float = 0.2
    critic_warmup: int = key(0, ge=0)  # steps during which only the critic trains
    # DAPO extras
    dynamic_sampling: DynamicSamplingConfig = key(factory=DynamicSamplingConfig)
    overlong_penalty: OverlongPenaltyConfig = key(factory=OverlongPenaltyConfig)
    mask_truncated: bool = False  # drop responses that hit max_new_tokens from the loss
    # Engine -> pi_old correction (importance weights, rejection, bypass mode): verl/config/rollout_correction.py
    rollout_correction: RolloutCorrectionConfig = key(factory=RolloutCorrectionConfig)
    pf_ppo: PfPpoConfig = key(factory=PfPpoConfig)

    def validate(self, path: str) -> None:
        if self.pf_ppo.enable and self.adv_estimator not in (None, "gae"):  # None: the preset fills it, checked then
            raise ConfigError(f"{path}.pf_ppo.enable: resamples the batch after GAE's advantages (as real verl's "
                              f"compute_advantage does, for gae only); adv_estimator is {self.adv_estimator}")
        if self.clip_ratio_c and self.clip_ratio_c <= 1:
            raise ConfigError(f"{path}.clip_ratio_c: dual-clip bound must be > 1 (or 0 = off), got {self.clip_ratio_c}")
        if self.clip_ratio_c and self.policy_loss is not None and not _loss(self.policy_loss).dual_clip:
            raise ConfigError(f"{path}.clip_ratio_c: the '{self.policy_loss}' loss has no dual clip (only ppo's "
                              f"has); remove clip_ratio_c or set it to 0")


def apply_preset(algo: AlgorithmConfig) -> None:
    """Fill the unset (None) keys of `algo` from its preset, then from the declared defaults,
    and derive clip_ratio_high; then check the filled section."""
    from verl.algorithms.presets import PRESETS

    partial = PRESETS[algo.name]
    _bypass_loss(algo)
    fixed = _fixed_agg_mode(algo.policy_loss or partial.get("policy_loss"))
    if fixed and algo.loss_agg_mode is None:  # the loss's own aggregation before any preset default
        algo.loss_agg_mode = fixed
    _fill(algo, partial)
    if algo.clip_ratio_high is None:
        algo.clip_ratio_high = algo.clip_ratio_low
    algo.check(AlgorithmConfig.SECTION)


def _bypass_loss(algo: AlgorithmConfig) -> None:
    """Bypass mode runs the loss its loss_type names (ppo_clip: ppo, reinforce: reinforce), as real
    verl's does whatever its loss_mode says: unset, policy_loss takes it; another one is refused."""
    rc = algo.rollout_correction
    if not rc.bypass_mode:
        return
    from verl.algorithms.off_policy import LOSS_TYPES

    wanted = LOSS_TYPES[rc.loss_type]
    if algo.policy_loss is None:
        algo.policy_loss = wanted
    elif algo.policy_loss != wanted:
        raise ConfigError(f"algorithm.policy_loss: {algo.policy_loss} with algorithm.rollout_correction.bypass_mode: "
                          f"the bypass loss_type {rc.loss_type} runs the {wanted} loss; remove policy_loss or set it "
                          f"to {wanted}")


def _loss(policy_loss: str):
    from verl.algorithms.policy_losses import POLICY_LOSSES

    return POLICY_LOSSES[policy_loss]


def _fixed_agg_mode(policy_loss: Optional[str]) -> Optional[str]:
    """The aggregation a policy loss's formula fixes (geo_mean), else None."""
    from verl.algorithms.policy_losses import POLICY_LOSSES

    loss = POLICY_LOSSES.get(policy_loss or "")
    return loss.agg_mode if loss else None


def _fill(section: Section, partial: dict) -> None:
    for name, value in partial.items():
        current = getattr(section, name)
        if isinstance(current, Section):
            _fill(current, value)
        elif current is None:
            setattr(section, name, value)
    for f in dataclasses.fields(section):
        sub = getattr(section, f.name)
        if isinstance(sub, Section) and f.name not in partial:
            sub.fill_unset()
    section.fill_unset()
