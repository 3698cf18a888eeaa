"""Critic: V(s_t) for every response position, from a value head on its own backbone.

`critic.name` may be a different (e.g. smaller) model that shares the actor's
tokenizer; by default it starts from the actor's weights. `training.use_packed_samples`
runs it padding-free (causal backbones), `training.offload_idle_models` keeps it and its
optimizer state on the CPU between uses. Its update is the actor's loop
(`verl.workers.update_loop`) with the clipped value loss.

    Critic.from_config(config, device)     critic.compute_values(batch) -> values (B, R)
    critic.update(batch) -> metrics        critic.model / state_dict() / load_state_dict()
"""

from __future__ import annotations

import torch

from verl.algorithms.value_loss import compute_value_loss, explained_variance
from verl.batch import Batch
from verl.models.loading import _path_or_hub, attn_implementation, disable_dropout, load_error, torch_dtype
from verl.workers.memory_budget import TokenBudget, pending_bytes
from verl.workers.micro_batches import MicroBatching, on_device, pad_response_columns
from verl.workers.offload import IdleOffload
from verl.workers.optim import TrainingState, build_optimizer, build_scheduler, critic_setting
from verl.workers.packing import packed_forward
from verl.workers.update_loop import MicroLoss, run_update


def new_value_head(hidden_size: int) -> torch.nn.Linear:
    """V = w . h + b, float32. Small init: early values near 0 keep the first advantages close
    to the (normalised) rewards instead of noise from a random projection."""
    head = torch.nn.Linear(hidden_size, 1)
    torch.nn.init.normal_(head.weight, std=1.0 / (hidden_size + 1))
    torch.nn.init.zeros_(head.bias)
    return head


class ValueModel(torch.nn.Module):
    """A transformer trunk plus a scalar head: hidden (B, T, H) -> values (B, T)."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.trunk = trunk
        self.value_head = new_value_head(hidden_size)

    def forward(self, input_ids, attention_mask, position_ids, **kwargs):
        out = self.trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=False, **kwargs)
        return self.value_head(out.last_hidden_state).squeeze(-1).float()

    def packed_values(self, packed, mode: str) -> torch.Tensor:
        """Values (M,) at the states before each real response token of a packed micro-batch."""
        hidden = packed_forward(self.trunk, packed, mode)[0]  # (N, H)
        return self.value_head(hidden[packed.pred_index]).squeeze(-1).float()


def load_value_model(critic_cfg, model_cfg, device_type: str | None = None) -> ValueModel:
    """critic.name's backbone (model.name's when unset) with a fresh value head, float32."""
    from transformers import AutoModel

    c = critic_cfg
    name = c.name or model_cfg.name
    key = "critic.name" if c.name else "model.name"
    path = _path_or_hub(name, key)
    try:
        trunk = AutoModel.from_pretrained(path, dtype=torch.float32, trust_remote_code=c.trust_remote_code,
                                          attn_implementation=attn_implementation(model_cfg, device_type,
                                                                                   c.dtype))
    except Exception as exc:  # noqa: BLE001 - one line naming the key at fault (verl.models.loading.load_error)
        note = "" if c.name else (" (critic.name is unset, so the critic loads model.name; model.trust_remote_code "
                                  "covers the actor only)")
        raise load_error(exc, name, path, key, "a critic backbone", "critic.trust_remote_code", note) from None
    disable_dropout(trunk)
    hidden = trunk.config.get_text_config().hidden_size
    return ValueModel(trunk, hidden)


class Critic(TrainingState):
    def __init__(self, model_cfg, critic_cfg, training_cfg, device: torch.device, micro: MicroBatching, *,
                 seed: int, cliprange_value: float, model: ValueModel | None = None, adapt_to_memory: bool = True):
        """model_cfg, critic_cfg, training_cfg: the config's model, critic and training sections;
        cliprange_value: algorithm.cliprange_value; seed: the config's (the shuffler draws from
        seed + 1). adapt_to_memory as for `Actor`."""
        self.training = training_cfg
        self.device = device
        self.micro = micro
        self.cliprange_value = cliprange_value
        self.compute_dtype = torch_dtype(critic_cfg.dtype or model_cfg.dtype)
        self.model = (model or load_value_model(critic_cfg, model_cfg, device.type)).to(device)
        if model_cfg.enable_gradient_checkpointing:
            self.model.trunk.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        t = training_cfg
        self.packing_mode, self.micro = micro.with_packing(self.model.trunk, "critic")
        self.optimizer = build_optimizer(self.model.parameters(), t.critic_lr, critic_setting(t, "weight_decay"),
                                         device, t.weight_decay_1d)
        self.scheduler = build_scheduler(self.optimizer, t, critic=True)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.offload = IdleOffload(self.model, device, t.offload_idle_models, self.optimizer)
        self.adapt_to_memory = adapt_to_memory
        self.budget = TokenBudget.maybe(
            "critic", device, micro, adapt_to_memory, self.model.trunk.config,
            lambda: pending_bytes(self.model, list(self.model.parameters()), self.optimizer, self.compute_dtype,
                                  training=True),
            training=True, lm_head=False, compute_dtype=self.compute_dtype, checkpointing=model_cfg.enable_gradient_checkpointing,
            chunk_size=t.logprob_chunk_size)

    @classmethod
    def from_config(cls, config, device: torch.device, model: ValueModel | None = None, **kwargs) -> "Critic":
        """kwargs: a subclass's own (rank, world_size; actor_tokenizer) or adapt_to_memory."""
        return cls(config.model, config.critic, config.training, device, MicroBatching.from_training(config.training),
                   seed=config.seed, cliprange_value=config.algorithm.cliprange_value, model=model, **kwargs)

    def _micro_batching(self) -> MicroBatching:
        """self.micro, with a token budget from the free GPU memory where the defaults leave it
        open (`verl.workers.memory_budget`)."""
        return self.micro if self.budget is None else self.budget.apply(self.micro)

    def _forward(self, mb: Batch) -> tuple[Batch, torch.Tensor]:
        """(mb on the device, values (b, r') of the states before each response token)."""
        with on_device(mb, self.device, self.micro.packed, self.compute_dtype) as (mb, packed):
            if packed is not None:
                return mb, packed.unpack(self.model.packed_values(packed, self.packing_mode))
            v = self.model(mb.input_ids, mb.attention_mask, mb.position_ids)
        r = mb.response_length
        return mb, v[:, -r - 1:-1]  # value of the state before each response token

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """values (B, R), zero on masked positions."""
        out = []
        with self.offload.active():
            for mb in self._micro_batching().split(batch):
                mb, v = self._forward(mb)
                out.append(pad_response_columns(v * mb.response_mask, batch.response_length))
            result = torch.cat(out).cpu()
        return result

    def rank_share(self, mini: Batch, micro: MicroBatching) -> Batch:
        """Rows of `mini` this process trains on: all; a data-parallel rank keeps its share
        (see Actor.rank_share)."""
        return mini

    def _micro_loss(self, mb: Batch, counts: dict) -> MicroLoss:
        mb, v = self._forward(mb)
        loss, m = compute_value_loss(v, mb.values, mb.returns, mb.response_mask, self.cliprange_value,
                                     loss_agg_mode="token-mean", **counts)
        return MicroLoss(loss, {"critic/vf_loss": loss.detach()}, {f"critic/{k}": val for k, val in m.items()})

    def update(self, batch: Batch) -> dict:
        """Clipped value regression towards `batch.returns`, batched like the actor's update."""
        with self.offload.active():
            self.model.train()
            micro = self._micro_batching()
            result = run_update(batch, self.training, self.generator, micro, self._micro_loss,
                                {"critic": (self.optimizer, list(self.model.parameters()))},
                                rank_share=self.rank_share, retry_oom=self.adapt_to_memory)
        if result.micro != micro:
            self.micro = result.micro  # halved after an out-of-memory error: kept for later passes
        self.scheduler.step()
        metrics = result.metrics
        metrics["critic/explained_var"] = float(explained_variance(batch.values, batch.returns, batch.response_mask))
        return metrics
