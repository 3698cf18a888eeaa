"""Driver-side stand-ins for Actor, Reference, Critic and the reward manager: same methods,
work done by a group of rank processes.

    actor.compute_log_probs(batch) -> (log_probs, entropy)   rows split across ranks, gathered back
    actor.compute_old_log_probs(batch, may_defer) -> PiOld    the same as a record (never deferred)
    actor.update(batch) -> metrics                            whole batch to every rank (one object)
    actor.model                                               a Hugging Face model on the driver
                                                              holding the gathered current weights
    actor.save_checkpoint(dir) / load_checkpoint(dir)         sharded (one file per rank)
    actor.state_dict() / load_state_dict(sd)                  gathered full state (model, optimizer,
                                                              scheduler, shuffler)

`actor.model` (the seed's `trainer.actor.model.generate(...)`, the final save, and the HF
rollout engine on the driver) is refreshed from the shards:
  - right after every update when generation runs on the driver (rollout on the driver
    samples with this copy: `distributed.rollout: driver`);
  - lazily otherwise (rollout replicas hold their own weights): on its next forward or
    `state_dict()` call (`generate`, `save_pretrained` go through these), so a run never
    pays for a gather it does not use. Reading raw `.parameters()` values in this mode
    can see old weights; `actor.full_state_dict()` always gathers the current ones.
`critic.model` behaves the same way (always lazily).
"""

from __future__ import annotations

from typing import Optional

import torch

from verl.batch import Batch
from verl.distributed import dispatch
from verl.distributed.worker_group import WorkerGroup
from verl.roles import ActorRole, CriticRole, PiOld, ReferenceRole, RewardRole
from verl.workers.actor import pi_old_pass
from verl.workers.micro_batches import MicroBatching


def _on_the_ranks(name: str):
    raise AttributeError(
        f"'{name}' lives on the ranks of a distributed run (sharded with the model); save and restore "
        "it with save_checkpoint/load_checkpoint or state_dict/load_state_dict "
        "(verl.distributed.checkpoint.write_full_state / restore_full_state for a whole run)")


class _DriverCopy:
    """A full copy of a sharded model on the driver, re-gathered when the shards changed."""

    def __init__(self, build, group: WorkerGroup, eager: bool):
        self._build, self._group, self.eager = build, group, eager
        self.module: Optional[torch.nn.Module] = None
        self.version = 0  # bumped by every change of the shards
        self.synced = -1
        self._refreshing = False

    def changed(self) -> None:
        self.version += 1
        if self.eager and self.module is not None:
            self.refresh()

    def get(self) -> torch.nn.Module:
        if self.module is None:
            self.module = self._build()
            self.module.register_forward_pre_hook(lambda *_: self.refresh())
            self.module.register_state_dict_pre_hook(lambda *_: self.refresh())
        if self.eager:
            self.refresh()
        return self.module

    def refresh(self) -> None:
        if self.synced == self.version or self._refreshing or self.module is None:
            return
        self._refreshing = True
        try:
            state = self._group.call("full_state_dict")[0]
            missing, unexpected = self.module.load_state_dict(state, strict=False)
            if unexpected:
                raise RuntimeError(f"gathered weights do not fit the driver's model: {unexpected[:5]}")
            self.synced = self.version
        finally:
            self._refreshing = False


class _ShardedRole:
    def __init__(self, group: WorkerGroup, config):
        self.group, self.config = group, config
        self.world_size = group.world_size
        self.micro = MicroBatching.from_training(config.training)  # the ranks' (fixed: no memory budget)

    def awake_token_budget(self) -> Optional[int]:
        return None  # the ranks size their own micro-batches (fixed: no memory budget)

    def packs_sequences(self) -> bool:
        return self.micro.packed

    def _split_call(self, method: str, batch: Batch):
        """`method` on each rank's rows; answers put back in the batch's row order."""
        index, parts = dispatch.shard_for_ranks(batch, self.world_size, self.micro)
        results = self.group.call(method, per_rank=parts)
        return dispatch.gather_rows(index, results, len(batch))


class _TrainableRole(_ShardedRole):
    copy: _DriverCopy

    # The optimizer, its schedule and the mini-batch shuffler live on the ranks, sharded with the model.
    optimizer = property(lambda self: _on_the_ranks("optimizer"))
    scheduler = property(lambda self: _on_the_ranks("scheduler"))
    generator = property(lambda self: _on_the_ranks("generator"))

    def update(self, batch: Batch) -> dict:
        import ray

        ref = ray.put(batch)  # one copy in the object store, read by every rank
        metrics = dispatch.reduce_update_metrics(self.group.call("update", ref))
        self.copy.changed()
        return metrics

    @property
    def model(self) -> torch.nn.Module:
        return self.copy.get()

    def full_state_dict(self) -> dict:
        """{name: full tensor} of the current weights (gathered to the driver)."""
        return self.group.call("full_state_dict")[0]

    def state_dict(self) -> dict:
        return self.group.call("state_dict")[0]

    def load_state_dict(self, state: dict) -> None:
        self.group.call("load_state_dict", per_rank=[state] + [None] * (self.world_size - 1))
        self.copy.changed()

    def save_checkpoint(self, path: str) -> str:
        """Sharded save into folder `path` (on a filesystem every node sees)."""
        self.group.call("save_checkpoint", path)
        return path

    def load_checkpoint(self, path: str) -> None:
        self.group.call("load_checkpoint", path)
        self.copy.changed()


class ActorGroup(_TrainableRole, ActorRole):
    def __init__(self, group: WorkerGroup, config, eager_copy: bool):
        super().__init__(group, config)

        def build():
            from verl.models.loading import load_causal_lm

            return load_causal_lm(config.model, torch.float32).eval()

        self.copy = _DriverCopy(build, group, eager_copy)
        if eager_copy:
            self.copy.get()

    def compute_log_probs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        return self._split_call("compute_log_probs", batch)

    def defers_old_log_probs(self, batch: Batch, may_defer: bool) -> bool:
        """Never: each rank's update forward sees only its share of the rows, whose log-probs
        would have to come back to the driver; the separate pass runs instead."""
        return False

    def compute_log_probs_and_sum_pi_squared(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._split_call("compute_log_probs_and_sum_pi_squared", batch)

    def compute_old_log_probs(self, batch: Batch, may_defer: bool) -> PiOld:
        """PiOld (B, R), as `Actor.compute_old_log_probs`; with the optimal token baseline also
        sum_pi_squared (B, R), each rank's rows gathered back."""
        return pi_old_pass(self, batch, self.config.algorithm.adv_estimator)

    def update_taking_pi_old(self, batch: Batch) -> tuple[dict, PiOld]:
        raise NotImplementedError("ActorGroup never defers pi_old (defers_old_log_probs is False)")

    def push_weights(self, replicas: list, leaders: list[int], bucket_mb: float, dtype: str) -> tuple[dict, dict]:
        """Stream the gathered weights, bucket by bucket, into rollout replicas: (rank 0's sync metrics,
        {replica index: why} for the replicas that died during it, from every leading rank)."""
        results = self.group.call("weight_buckets_to", replicas, leaders, bucket_mb, dtype)
        lost = {j: why for r in results for j, why in r.pop("lost_replicas").items()}
        return results[0], lost


class CriticGroup(_TrainableRole, CriticRole):
    def __init__(self, group: WorkerGroup, config):
        super().__init__(group, config)

        def build():
            from verl.workers.critic import load_value_model

            return load_value_model(config.critic, config.model).eval()

        self.copy = _DriverCopy(build, group, eager=False)

    def compute_values(self, batch: Batch) -> torch.Tensor:
        return self._split_call("compute_values", batch)


class ReferenceGroup(_ShardedRole, ReferenceRole):
    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        return self._split_call("compute_log_probs", batch)


class RewardGroup(RewardRole):
    """The reward manager, one per rank, each scoring a contiguous share of the rows."""

    def __init__(self, group: WorkerGroup):
        self.group = group

    def score(self, batch: Batch) -> tuple[torch.Tensor, dict]:
        scores, _, metrics = self.score_parts(batch)
        return scores, metrics

    def score_parts(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(scores (B,), each component's scores (B, K), metrics): RewardManager.score_parts over the ranks."""
        parts = batch.chunk(self.group.world_size)
        results = self.group.call("score_parts", per_rank=parts)
        scores = torch.cat([s for s, _, _ in results]).float()
        components = torch.cat([c for _, c, _ in results]).float()
        n = max(1, len(batch))
        metrics: dict = {}
        for part, (_, _, m) in zip(parts, results):
            for k, v in m.items():
                # counts add up; per-sample means are weighted by the rows each rank scored
                metrics[k] = metrics.get(k, 0.0) + (v if k.endswith("errors") else v * len(part) / n)
        return scores, components, metrics
