"""`critic` section: the value model PPO's GAE needs (its own backbone, or a head on the actor's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, key
from verl.errors import ConfigError


@dataclass
class CriticConfig(Section):
    SECTION = "critic"
    type: str = key("huggingface", choices=("huggingface",))
    name: Optional[str] = None  # None -> the actor's model
    share_actor: bool = False  # value head on the actor's trunk, trained by one combined loss
    vf_coef: float = 0.5  # share_actor: L = L_policy + vf_coef * L_value
    dtype: Optional[str] = key(None, choices="verl.models.loading:DTYPES")  # None -> model.dtype
    trust_remote_code: bool = key(False, resume_safe=True)

    def validate(self, path: str) -> None:
        if self.share_actor:
            if self.name:
                raise ConfigError(f"{path}.share_actor: a value head on the actor's trunk has no backbone of its "
                                  f"own; drop critic.name ('{self.name}') or set critic.share_actor: false")
            if not self.vf_coef > 0:
                raise ConfigError(f"{path}.vf_coef: must be > 0, got {self.vf_coef}")
