"""The backend interface (verl/backends has the implementations) and the roles it builds.

What the trainer calls on each role (single-process workers and Ray groups alike):
    actor      compute_old_log_probs(batch, may_defer), update(batch), last_entropy, model,
               state_dict() / load_state_dict()
    reference  compute_log_probs(batch)                          (None: the algorithm has no KL)
    teacher    compute_log_probs(batch)                          (None: no distillation)
    critic     compute_values(batch), update(batch), model       (None: no value model)
    reward     score(batch) -> (scores (B,), metrics)
    rollout    generate(prompts, sampling), sync_weights(model), sleep(), wake_up()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class Roles:
    actor: Any
    reward: Any
    rollout: Any
    reference: Optional[Any] = None
    critic: Optional[Any] = None
    teacher: Optional[Any] = None


class Backend:
    """Builds the roles a run needs and knows how its full state is written and read."""

    name = ""

    def build_roles(self, config, tokenizer, device, reward) -> Roles:
        """The roles for `config`; `reward` is the driver's reward manager (already built, so a bad
        reward function fails before any model loads), which a backend may replace by a remote one."""
        raise NotImplementedError

    @property
    def state_io(self):
        """A module (or object) with write_full_state(run_state, folder, reason) and
        restore_full_state(run_state, path) for this backend's checkpoint layout."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release what build_roles started (processes, devices)."""
