"""Critic: V(s_t) for every response position, from a value head on its own backbone.

`critic.name` may be a different (e.g. smaller) model that shares the actor's
tokenizer; by default it starts from the actor's weights. `training.use_packed_samples`
runs it padding-free (causal backbones), `training.offload_idle_models` keeps it and its
optimizer state on the CPU between uses.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from verl.algorithms.value_loss import explained_variance
from verl.algorithms.value_loss import compute_value_loss
from verl.algorithms.masked import count_tokens_and_seqs
from verl.batch import Batch
from verl.models.loading import _path_or_hub, attn_implementation, disable_dropout, load_error, torch_dtype
from verl.workers.micro_batches import batch_to_device, make_micro_batches, pad_response_columns, trim_padding
from verl.workers.offload import IdleOffload
from verl.workers.packing import pack_batch, packed_forward, prepare_packing
from verl.workers.optim import autocast_context, build_optimizer, build_scheduler, guarded_step


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


def load_value_model(config, device_type: str | None = None) -> ValueModel:
    from transformers import AutoModel

    c = config.critic
    name = c.name or config.model.name
    key = "critic.name" if c.name else "model.name"
    path = _path_or_hub(name, key)
    try:
        trunk = AutoModel.from_pretrained(path, dtype=torch.float32, trust_remote_code=c.trust_remote_code,
                                          attn_implementation=attn_implementation(config.model, device_type,
                                                                                   c.dtype))
    except Exception as exc:  # noqa: BLE001 - one line naming the key at fault (verl.models.loading.load_error)
        note = "" if c.name else (" (critic.name is unset, so the critic loads model.name; model.trust_remote_code "
                                  "covers the actor only)")
        raise load_error(exc, name, path, key, "a critic backbone", "critic.trust_remote_code", note) from None
    disable_dropout(trunk)
    hidden = trunk.config.get_text_config().hidden_size
    return ValueModel(trunk, hidden)


class Critic:
    def __init__(self, config, device: torch.device, model: ValueModel | None = None):
        self.config = config
        self.device = device
        self.compute_dtype = torch_dtype(config.critic.dtype or config.model.dtype)
        self.model = (model or load_value_model(config, device.type)).to(device)
        if config.model.enable_gradient_checkpointing:
            self.model.trunk.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        t = config.training
        self.packed = t.use_packed_samples
        self.packing_mode = prepare_packing(self.model.trunk) if self.packed else None
        self.optimizer = build_optimizer(self.model.parameters(), t.critic_lr, t.weight_decay, device)
        self.scheduler = build_scheduler(self.optimizer, t)
        self.generator = torch.Generator().manual_seed(config.seed + 1)
        self.offload = IdleOffload(self.model, device, t.offload_idle_models, self.optimizer)

    def _forward(self, mb: Batch) -> tuple[Batch, torch.Tensor]:
        mb = trim_padding(mb)
        pk = pack_batch(mb.input_ids, mb.attention_mask, mb.response_length).to(self.device) if self.packed else None
        mb = batch_to_device(mb, self.device)
        with autocast_context(self.device, self.compute_dtype):
            if pk is not None:
                return mb, pk.unpack(self.model.packed_values(pk, self.packing_mode))
            v = self.model(mb.input_ids, mb.attention_mask, mb.position_ids)
        r = mb.response_length
        return mb, v[:, -r - 1:-1]  # value of the state before each response token

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """values (B, R), zero on masked positions."""
        t = self.config.training
        out = []
        with self.offload.active():
            for mb in make_micro_batches(batch, t.micro_batch_size, t.max_tokens_per_micro_batch, self.packed):
                mb, v = self._forward(mb)
                out.append(pad_response_columns(v * mb.response_mask, batch.response_length))
            result = torch.cat(out).cpu()
        return result

    def rank_share(self, mini: Batch) -> Batch:
        """Rows of `mini` this process trains on: all; a data-parallel rank keeps its share
        (see Actor.rank_share)."""
        return mini

    def update(self, batch: Batch) -> dict:
        """Clipped value regression towards `batch.returns`, same batching as the actor."""
        with self.offload.active():
            return self._update(batch)

    def _update(self, batch: Batch) -> dict:
        a, t = self.config.algorithm, self.config.training
        self.model.train()
        sums: dict = defaultdict(float)  # device tensors until the end: no per-micro-batch sync
        n_updates = n_bad = 0
        for _ in range(t.num_epochs):
            for mini in batch.iter_minibatches(t.mini_batch_size, self.generator,
                                               shuffle=t.num_epochs > 1 or t.mini_batch_size < len(batch)):
                num_tokens, num_seqs = count_tokens_and_seqs(mini.response_mask)
                counts = dict(num_tokens=num_tokens, num_seqs=num_seqs)
                for mb in make_micro_batches(self.rank_share(mini), t.micro_batch_size,
                                             t.max_tokens_per_micro_batch, self.packed):
                    share = float(mb.response_mask.sum()) / max(counts["num_tokens"], 1.0)  # host-side mask
                    mb, v = self._forward(mb)
                    loss, m = compute_value_loss(v, mb.values, mb.returns, mb.response_mask, a.cliprange_value,
                                                 loss_agg_mode="token-mean", **counts)
                    loss.backward()
                    sums["critic/vf_loss"] += loss.detach()
                    for k, val in m.items():
                        sums[f"critic/{k}"] += (val.detach() if isinstance(val, torch.Tensor) else float(val)) * share
                grad_norm, ok = guarded_step(self.optimizer, self.model.parameters(), t.grad_clip)
                n_updates += 1
                n_bad += not ok
                sums["critic/grad_norm"] += grad_norm if ok else 0.0
        self.scheduler.step()
        metrics = {k: float(v) / n_updates for k, v in sums.items()}
        metrics["critic/grad_norm"] = sums["critic/grad_norm"] / max(1, n_updates - n_bad)
        metrics["critic/nonfinite_updates"] = float(n_bad)
        metrics["critic/explained_var"] = float(explained_variance(batch.values, batch.returns, batch.response_mask))
        return metrics
