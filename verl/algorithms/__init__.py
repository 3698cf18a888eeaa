"""The algorithm layer: pure tensor functions (advantages, losses, KL, aggregation).

Nothing here knows about models, workers or configs beyond `build_kl_controller` and
`requirements` (which roles an algorithm needs); the trainer picks functions by the names in
`AlgorithmConfig`, and the config takes its choices from the tables here. See docs/algorithms.md.
"""

from verl.algorithms.advantages import (
    ADV_ESTIMATORS,
    ESTIMATORS,
    GROUP_ESTIMATORS,
    compute_advantages,
    compute_gae,
    compute_grpo,
    compute_reinforce_pp,
    compute_reinforce_pp_baseline,
    compute_remax,
    compute_rloo,
    discounted_returns,
)
from verl.algorithms.aggregation import LOSS_AGG_MODES, aggregate_loss
from verl.algorithms.dapo import dynamic_sampling_keep, overlong_penalty
from verl.algorithms.entropy import entropy_from_logits
from verl.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    build_kl_controller,
    kl_penalty,
)
from verl.algorithms.masked import count_tokens_and_seqs, masked_mean, masked_sum, masked_var, masked_whiten
from verl.algorithms.policy_losses import POLICY_LOSSES, compute_policy_loss
from verl.algorithms.presets import PRESETS
from verl.algorithms.value_loss import compute_value_loss, explained_variance

__all__ = [
    "ADV_ESTIMATORS", "ESTIMATORS", "GROUP_ESTIMATORS", "KL_ESTIMATORS", "LOSS_AGG_MODES", "POLICY_LOSSES", "PRESETS",
    "AdaptiveKLController", "FixedKLController", "aggregate_loss", "apply_kl_in_reward",
    "build_kl_controller", "compute_advantages", "compute_gae", "compute_grpo", "compute_policy_loss",
    "compute_reinforce_pp", "compute_reinforce_pp_baseline", "compute_remax", "compute_rloo",
    "compute_value_loss", "count_tokens_and_seqs", "discounted_returns", "dynamic_sampling_keep",
    "entropy_from_logits", "explained_variance", "kl_penalty", "masked_mean", "masked_sum", "masked_var",
    "masked_whiten", "overlong_penalty",
]
