"""Every role in this process (`distributed.backend: none`, the default)."""

from __future__ import annotations

from verl.algorithms.requirements import needs_critic, needs_reference
from verl.roles import Backend, Roles
from verl.rollout.registry import build_rollout
from verl.workers.actor import Actor
from verl.workers.critic_factory import build_critic
from verl.workers.reference import Reference
from verl.workers.teacher import Teacher


class LocalBackend(Backend):
    name = "none"

    def build_roles(self, config, tokenizer, device, reward) -> Roles:
        a = config.algorithm
        actor = Actor.from_config(config, device)
        reference = Reference.from_config(config, device, actor.model) if needs_reference(a) else None
        critic = build_critic(config, device, actor, tokenizer) if needs_critic(a) else None
        teacher = Teacher.from_config(config, device, tokenizer) if config.distillation.enable else None
        rollout = build_rollout(config, actor.model, tokenizer)
        return Roles(actor=actor, reward=reward, rollout=rollout, reference=reference, critic=critic, teacher=teacher)

    @property
    def state_io(self):
        from verl.checkpoint import full_state

        return full_state
