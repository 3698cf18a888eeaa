"""`distributed.backend: ray`: the roles as Ray worker groups (verl/distributed/factory.py),
behind the interface of verl/backends/base.py, with the sharded checkpoint layout."""

from __future__ import annotations

from verl.roles import Backend, Roles
from verl.rollout.registry import build_rollout


class RayBackend(Backend):
    name = "ray"

    def __init__(self):
        self.workers = None

    def build_roles(self, config, tokenizer, device, reward) -> Roles:
        from verl.distributed.factory import build_distributed_workers

        w = self.workers = build_distributed_workers(config, tokenizer)
        # Driver-side rollout (distributed.rollout: driver) generates with the actor's gathered copy.
        rollout = w.rollout or build_rollout(config, w.actor.model, tokenizer)
        return Roles(actor=w.actor, reward=w.reward or reward, rollout=rollout, reference=w.reference,
                     critic=w.critic)

    @property
    def state_io(self):
        from verl.distributed import checkpoint

        return checkpoint

    def shutdown(self) -> None:
        if self.workers is not None:
            self.workers.shutdown()
            self.workers = None
