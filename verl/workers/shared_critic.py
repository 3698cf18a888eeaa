"""Critic variant `critic.share_actor: true`: a value head on the actor's own trunk.

    V(s_t) = w . h_t + b      h_t: the actor's last hidden state at the position that predicts
                              response token t, the very vector the LM head reads for log pi(y_t)

No second backbone: the critic costs H + 1 parameters and their AdamW state, where a
separate critic costs a whole model, its gradients and its optimizer state. The two
objectives meet in one backward pass of the actor's update (`Actor.update`):

    L = L_policy (+ entropy, KL terms) + critic.vf_coef * L_value

so the trunk learns from both. The head has its own AdamW at `training.critic_lr`, stepped
together with the actor's optimizer (both are skipped when either gradient is NaN/Inf).

Critic warm-up (`algorithm.critic_warmup` steps) trains the head alone on detached hidden
states: "only the critic trains" must leave the policy untouched, and here the trunk is
the policy's. The head's scheduler steps once per trainer step, so its count is the number
of steps taken (restored with the checkpoint) and says when warm-up is over.

Not with a text critic (`critic.name`, its own backbone by definition) nor with
`distributed.backend: ray` (config errors say so).
"""

from __future__ import annotations

import torch

from verl.batch import Batch
from verl.workers.critic import new_value_head
from verl.workers.logprobs import unwrap_hf
from verl.workers.optim import build_optimizer, build_scheduler


class SharedCritic:
    """The `Critic` interface (compute_values, update, model, optimizer, scheduler) for a value
    head that lives on the actor; `model` is the head only (what a checkpoint saves)."""

    def __init__(self, config, actor):
        self.config = config
        self.actor = actor
        hidden = unwrap_hf(actor.model).config.get_text_config().hidden_size
        self.model = new_value_head(hidden).to(actor.device)  # float32, like the actor's master weights
        t = config.training
        self.optimizer = build_optimizer(self.model.parameters(), t.critic_lr, t.weight_decay, actor.device)
        self.scheduler = build_scheduler(self.optimizer, t)
        self.generator = None  # mini-batches are the actor's (one combined update)
        actor.attach_value_head(self)

    @property
    def steps_taken(self) -> int:
        return int(self.scheduler.last_epoch)

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """values (B, R), zero on masked positions: one trunk pass, no LM head."""
        return self.actor.compute_values(batch)

    def update(self, batch: Batch) -> dict:
        """During warm-up: a value-only update of the head. Afterwards the value loss is part of
        the actor's update (combined loss), so there is nothing to do here."""
        if self.steps_taken < self.config.algorithm.critic_warmup:
            return self.actor.update(batch, train_policy=False)
        return {}
