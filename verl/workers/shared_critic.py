"""Critic variant `critic.share_actor: true`: a value head on the actor's own trunk.

    V(s_t) = w . h_t + b      h_t: the actor's last hidden state at the position that predicts
                              response token t, the very vector the LM head reads for log pi(y_t)

No second backbone: the critic costs H + 1 parameters and their AdamW state, where a
separate critic costs a whole model, its gradients and its optimizer state. The two
objectives meet in one backward pass of the actor's update (`Actor.update`):

    L = L_policy (+ entropy, KL terms) + critic.vf_coef * L_value

so the trunk learns from both. The head has its own AdamW at `training.critic_lr`, stepped
together with the actor's optimizer (both are skipped when either gradient is NaN/Inf).

Two classes: `ActorWithValueHead`, the actor of such a run (`Actor.from_config` picks it),
owns the head and adds the value loss to its update; `SharedCritic` is that head seen as the
trainer's critic. The trainer calls what it calls with any critic and branches on nothing:

    critic.compute_values(batch)   one trunk pass, no LM head
    critic.update(batch)           during warm-up a value-only update; afterwards {} (the value
                                   loss is part of actor.update)
    actor.update(batch)            the combined loss, both optimizers stepped

Critic warm-up (`algorithm.critic_warmup` steps) trains the head alone on detached hidden
states: "only the critic trains" must leave the policy untouched, and here the trunk is
the policy's. The head's scheduler steps once per trainer step, so its count is the number
of steps taken (restored with the checkpoint) and says when warm-up is over.

Not with a text critic (`critic.name`, its own backbone by definition) nor with
`distributed.backend: ray` (config errors say so).
"""

from __future__ import annotations

import contextlib

import torch

from verl.algorithms.value_loss import compute_value_loss, explained_variance
from verl.batch import Batch
from verl.models.lora import base_model
from verl.workers.actor import Actor
from verl.workers.critic import new_value_head
from verl.workers.logprobs import response_hidden
from verl.workers.micro_batches import on_device, pad_response_columns
from verl.workers.optim import TrainingState, build_optimizer, build_scheduler, critic_setting
from verl.workers.update_loop import MicroLoss


class ActorWithValueHead(Actor):
    """An Actor whose trunk also feeds a value head V(s_t) = w . h_t + b (float32, like the
    master weights; `head` and `head_optimizer` / `head_scheduler` at training.critic_lr)."""

    def __init__(self, *args, vf_coef: float, cliprange_value: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.vf_coef, self.cliprange_value = vf_coef, cliprange_value
        hidden = base_model(self.model).config.get_text_config().hidden_size
        self.head = new_value_head(hidden).to(self.device)
        t = self.training
        self.head_optimizer = build_optimizer(self.head.parameters(), t.critic_lr, critic_setting(t, "weight_decay"),
                                              self.device, t.weight_decay_1d)
        self.head_scheduler = build_scheduler(self.head_optimizer, t, critic=True)

    @classmethod
    def from_config(cls, config, device: torch.device, model: torch.nn.Module | None = None,
                    **kwargs) -> "ActorWithValueHead":
        return cls(device=device, model=model, vf_coef=config.critic.vf_coef,
                   cliprange_value=config.algorithm.cliprange_value, **cls.config_kwargs(config), **kwargs)

    def _forward_values(self, mb: Batch, with_entropy: bool, train_trunk: bool):
        """One trunk pass feeding both heads -> (mb on the device, log-probs, entropy, values),
        each (b, r'). train_trunk False: no LM head, and the trunk runs without a graph, so
        only the value head learns."""
        model = self.forward_model()
        logp = ent = None
        with on_device(mb, self.device, self.micro.packed, self.compute_dtype, self.compiled) as (mb, packed):
            with contextlib.nullcontext() if train_trunk else torch.no_grad():
                rh = response_hidden(model, mb.input_ids, mb.attention_mask, mb.position_ids, mb.response_length,
                                     packed=packed, packing_mode=self.packing_mode, multi_modal=mb.multi_modal)
            if train_trunk:
                logp, ent = self._head_log_probs(model, rh, with_entropy)
            values = rh.unpack(self.head(rh.hidden).squeeze(-1).float())
        return mb, logp, ent, values

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Values (B, R), zero on masked positions, on CPU."""
        out = []
        for mb in self._micro_batching().split(batch):
            mb, _, _, v = self._forward_values(mb, with_entropy=False, train_trunk=False)
            out.append(pad_response_columns(v * mb.response_mask, batch.response_length))
        return torch.cat(out).cpu()

    def _value_loss(self, mb: Batch, values, counts: dict) -> tuple[torch.Tensor, dict, dict]:
        vf_loss, vf_metrics = compute_value_loss(values, mb.values, mb.returns, mb.response_mask,
                                                 self.cliprange_value, loss_agg_mode="token-mean", **counts)
        return vf_loss, {"critic/vf_loss": vf_loss.detach()}, {f"critic/{k}": v for k, v in vf_metrics.items()}

    def _micro_loss(self, mb: Batch, counts: dict) -> MicroLoss:
        """L_policy (+ entropy, KL) + vf_coef * L_value, from one trunk pass."""
        mb, logp, ent, values = self._forward_values(
            mb, with_entropy=self.algorithm.entropy_coeff > 0 or self._keep_pi_old, train_trunk=True)
        policy = self._policy_micro_loss(mb, logp, ent, counts)
        vf_loss, sums, means = self._value_loss(mb, values, counts)
        return MicroLoss(policy.loss + self.vf_coef * vf_loss, {**policy.sums, **sums}, {**policy.means, **means},
                         policy.keep)

    def _head_micro_loss(self, mb: Batch, counts: dict) -> MicroLoss:
        """vf_coef * L_value alone (warm-up), the head's term of the combined loss."""
        mb, _, _, values = self._forward_values(mb, with_entropy=False, train_trunk=False)
        vf_loss, sums, means = self._value_loss(mb, values, counts)
        return MicroLoss(self.vf_coef * vf_loss, sums, means)

    def _optimizers(self) -> dict:
        return {**super()._optimizers(), "critic": (self.head_optimizer, list(self.head.parameters()))}

    def update(self, batch: Batch) -> dict:
        """The combined update: both optimizers step together (both skip on a NaN/Inf norm)."""
        return self._head_stepped(batch, super().update(batch))

    def update_taking_pi_old(self, batch: Batch):
        metrics, pi_old = super().update_taking_pi_old(batch)
        return self._head_stepped(batch, metrics), pi_old

    def update_value_head(self, batch: Batch) -> dict:
        """Critic warm-up: the head alone learns, on detached hidden states; the policy (and its
        optimizer, scheduler and offloaded state) stays untouched."""
        self.model.train()
        pair = {"critic": self._optimizers()["critic"]}
        return self._head_stepped(batch, self._run_update(batch, self._head_micro_loss, pair).metrics)

    def _head_stepped(self, batch: Batch, metrics: dict) -> dict:
        """After an update: the head's schedule steps once (so it counts the trainer steps
        taken), and the head's explained variance joins the metrics."""
        self.head_scheduler.step()
        metrics["critic/explained_var"] = float(explained_variance(batch.values, batch.returns, batch.response_mask))
        return metrics


class SharedCritic(TrainingState):
    """The trainer's critic for `critic.share_actor`: the value head of an
    `ActorWithValueHead`. `model` is the head only (what a checkpoint saves); no generator of
    its own (the mini-batches are the actor's)."""

    generator = None

    def __init__(self, actor: ActorWithValueHead, critic_warmup: int):
        if not isinstance(actor, ActorWithValueHead):
            raise TypeError("critic.share_actor needs the actor built by Actor.from_config (an ActorWithValueHead)")
        self.actor, self.critic_warmup = actor, critic_warmup
        self.model, self.optimizer, self.scheduler = actor.head, actor.head_optimizer, actor.head_scheduler

    @classmethod
    def from_config(cls, config, actor: ActorWithValueHead) -> "SharedCritic":
        return cls(actor, config.algorithm.critic_warmup)

    @property
    def steps_taken(self) -> int:
        """Trainer steps taken: the head's schedule steps once per step (restored with it)."""
        return int(self.scheduler.last_epoch)

    def compute_values(self, batch: Batch) -> torch.Tensor:
        return self.actor.compute_values(batch)

    def update(self, batch: Batch) -> dict:
        """During warm-up a value-only update of the head. Afterwards the value loss is part of
        the actor's update (combined loss), so there is nothing to do here."""
        if self.steps_taken < self.critic_warmup:
            return self.actor.update_value_head(batch)
        return {}
