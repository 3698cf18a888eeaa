"""`algorithm.rollout_correction` section: correcting for the engine's samples coming from another policy
than pi_old (stale weights, another kernel or precision). Real verl 0.9.1's keys and meanings; the math
is in verl/algorithms/off_policy.py (the two modes), rollout_is.py (weights) and rollout_rs.py (rejection).

rollout.tis_cap / rollout.is_mode are a shorthand for the two common cases (off_policy.py's docstring);
a run gives one or the other (verl/config/checks.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, key
from verl.errors import ConfigError


@dataclass
class RolloutCorrectionConfig(Section):
    SECTION = "algorithm.rollout_correction"
    # importance weights pi_old / pi_engine: null (none), token, or sequence (the product over the response)
    rollout_is: Optional[str] = key(None, choices="verl.algorithms.rollout_is:IS_LEVELS")
    # U: weights truncated at U (TIS); "L_U": weights outside [L, U] set to 0, the tokens kept (IcePop)
    rollout_is_threshold: str = "2.0"
    rollout_is_batch_normalize: bool = False  # weights divided by their batch mean (mean 1)
    # rejection sampling: null, or options such as token_k1, seq_mean_k1, seq_max_k2 (comma-separated)
    rollout_rs: Optional[str] = None
    rollout_rs_threshold: Optional[str] = None  # one threshold for all options, or one per option
    # true: the engine's log-probs are pi_old (no recompute); loss_type picks the loss (ppo_clip | reinforce)
    bypass_mode: bool = False
    loss_type: str = key("ppo_clip", choices="verl.algorithms.off_policy:LOSS_TYPES")

    @property
    def enabled(self) -> bool:
        return bool(self.rollout_is or self.rollout_rs or self.bypass_mode)

    def validate(self, path: str) -> None:
        from verl.algorithms.rollout_is import parse_is_threshold
        from verl.algorithms.rollout_rs import parse_rejection

        if self.rollout_is:
            try:
                parse_is_threshold(self.rollout_is_threshold)
            except ValueError as exc:
                raise ConfigError(f"{path}.rollout_is_threshold: {exc}") from None
        if self.rollout_rs:
            if self.rollout_rs_threshold is None:
                raise ConfigError(f"{path}.rollout_rs_threshold: required with rollout_rs ({self.rollout_rs})")
            try:
                parse_rejection(self.rollout_rs, self.rollout_rs_threshold)
            except ValueError as exc:
                which = "rollout_rs_threshold" if "threshold" in str(exc) else "rollout_rs"
                raise ConfigError(f"{path}.{which}: {exc}") from None
        if self.loss_type != "ppo_clip" and not self.bypass_mode:
            raise ConfigError(f"{path}.loss_type: {self.loss_type} is a bypass-mode loss; set {path}.bypass_mode: "
                              f"true, or choose the loss with algorithm.policy_loss")
