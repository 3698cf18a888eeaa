"""The contracts of the roles a run is built from, as `typing.Protocol`s, the records they return, and
the backend interface that builds them (verl/backends has the implementations).

    actor      ActorRole      Actor (verl/workers/actor.py), ActorGroup (verl/distributed/groups.py)
    reference  ReferenceRole  Reference, Teacher, ReferenceGroup         (None: the algorithm has no KL)
    teacher    ReferenceRole  Teacher                                     (None: no distillation)
    critic     CriticRole     Critic and its variants, CriticGroup       (None: no value model)
    reward     RewardRole     the RewardManager, RewardGroup
    rollout    RolloutRole    every engine (verl/rollout/base.py RolloutEngine) and the wrappers the
                              asynchronous sources put over one: LockedEngine, VLLMStream

A wrapper implements its protocol explicitly, method by method (no `__getattr__` pass-through), so what
it offers is what the protocol says. The Ray groups run the same methods on their ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Protocol

if TYPE_CHECKING:  # annotations only: importing them here would make this module heavy
    import torch

    from verl.batch import Batch
    from verl.rollout.base import SamplingParams


class PiOld(NamedTuple):
    """What the pi_old pass gives back: log pi_old of the sampled tokens and the policy's entropy, (B, R)
    on the CPU in the batch's row order; sum_j pi_j^2 per token (B, R) where the advantage estimator
    reads it (the optimal token baseline), else None."""

    log_probs: "torch.Tensor"
    entropy: Optional["torch.Tensor"]
    sum_pi_squared: Optional["torch.Tensor"] = None


class ModelRole(Protocol):
    """What every model role offers the run's memory decisions (verl/trainer/sleep_policy.py)."""

    def awake_token_budget(self) -> Optional[int]:
        """The micro-batch token budget the free memory beside an awake rollout engine gives, derived now;
        None where there is no estimate (CPU, set micro-batching, remote ranks, a budget already fixed)."""


class ActorRole(ModelRole, Protocol):
    model: "torch.nn.Module"  # the policy as a Hugging Face module (on the driver for a Ray group)

    def packs_sequences(self) -> bool:
        """Whether its micro-batches pack sequences (tokens then count without padding)."""

    def defers_old_log_probs(self, batch: "Batch", may_defer: bool) -> bool:
        """Whether pi_old will come from the update's own first forward instead of a separate pass."""

    def compute_old_log_probs(self, batch: "Batch", may_defer: bool) -> Optional[PiOld]:
        """The pi_old pass; None where it is deferred to the update (update_taking_pi_old)."""

    def update(self, batch: "Batch") -> dict:
        """One PPO-style update on the batch (which holds old_log_probs); its metrics."""

    def update_taking_pi_old(self, batch: "Batch") -> tuple[dict, PiOld]:
        """The update for a deferred pi_old: its metrics and the pi_old its first forward gave."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class ReferenceRole(ModelRole, Protocol):
    def compute_log_probs(self, batch: "Batch") -> "torch.Tensor":
        """log-probs of the sampled tokens, (B, R)."""


class CriticRole(ModelRole, Protocol):
    model: "torch.nn.Module"

    def compute_values(self, batch: "Batch") -> "torch.Tensor":
        """V per response token, (B, R)."""

    def update(self, batch: "Batch") -> dict: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class RewardRole(Protocol):
    def score(self, batch: "Batch") -> tuple["torch.Tensor", dict]:
        """(scores (B,), metrics)."""


class RolloutRole(Protocol):
    def generate(self, prompts: "Batch", sampling: "SamplingParams") -> "Batch":
        """B prompts -> B * n rows (verl.batch's layout) with the engine's log-probs."""

    def sync_weights(self, model: "torch.nn.Module") -> dict:
        """The actor's current weights into the engine; the sync's metrics."""

    def sleep(self) -> None: ...

    def wake_up(self) -> None: ...

    def can_sleep(self) -> bool:
        """Whether sleep() frees device memory (vLLM and SGLang on a GPU with rollout.enable_sleep_mode)."""

    def unbacked_bytes(self) -> int:
        """Allocator bytes without device memory behind them now (an in-process engine asleep)."""

    def metrics(self) -> dict:
        """Metrics of the last generate beyond the Batch itself."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class Roles:
    actor: ActorRole
    reward: RewardRole
    rollout: RolloutRole
    reference: Optional[ReferenceRole] = None
    critic: Optional[CriticRole] = None
    teacher: Optional[ReferenceRole] = None


class Backend:
    """Builds the roles a run needs and knows how its full state is written and read."""

    name = ""

    def build_roles(self, config, tokenizer, device, reward) -> Roles:
        """The roles for `config`; `reward` is the driver's reward manager (already built, so a bad
        reward function fails before any model loads), which a backend may replace by a remote one."""
        raise NotImplementedError

    @property
    def state_io(self) -> Any:
        """A module (or object) with write_full_state(run_state, folder, reason) and
        restore_full_state(run_state, path) for this backend's checkpoint layout."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release what build_roles started (processes, devices)."""
