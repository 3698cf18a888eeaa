"""The critic a config asks for (`algorithm.adv_estimator: gae`)."""

from __future__ import annotations

from verl.models.loading import load_tokenizer
from verl.workers.critic import Critic


def build_critic(config, device, actor, actor_tokenizer):
    """A value model on its own backbone (one with a different tokenizer works on text,
    `TextCritic`), or with `critic.share_actor` a value head on the actor's trunk (`SharedCritic`
    of the `ActorWithValueHead` that `Actor.from_config` built)."""
    c = config.critic
    if c.share_actor:
        from verl.workers.shared_critic import SharedCritic

        return SharedCritic.from_config(config, actor)
    if critic_has_own_tokenizer(config, actor_tokenizer):
        from verl.workers.text_critic import TextCritic

        return TextCritic.from_config(config, device, actor_tokenizer)
    return Critic.from_config(config, device)


def critic_has_own_tokenizer(config, actor_tokenizer) -> bool:
    """critic.name names a backbone whose vocabulary is not the actor's: it reads text (TextCritic)."""
    c = config.critic
    if not c.name:
        return False
    return load_tokenizer(c.name, "critic.name", c.trust_remote_code).get_vocab() != actor_tokenizer.get_vocab()
