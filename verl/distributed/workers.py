"""What runs inside each rank process: the single-process Actor / Critic / Reference from
verl.workers, with their model sharded by FSDP2 and this rank's share of each batch.

One class per job (no role flags); `RankWorker` holds what every rank has in common
(identity, log files, process group). The trainer never sees these classes: it talks to
the driver-side groups in verl.distributed.groups, which split batches and gather answers.

Data flow per call:
    compute_log_probs / compute_values   this rank's rows (split on the driver), answers back
    update                               the whole batch on every rank; the mini-batches are
                                         drawn identically everywhere (same seeded generator),
                                         each rank trains on its share of each (`rank_share`)
                                         with the loss normalised by the mini-batch's global
                                         counts; FSDP sums the gradients over ranks.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import torch

from verl.batch import Batch
from verl.distributed import dispatch, fsdp
from verl.workers.actor import Actor
from verl.workers.critic import Critic


class RankWorker:
    """Rank `rank` of `world_size` in worker group `group`."""

    def __init__(self, rank: int, world_size: int, group: str):
        self.rank, self.world_size, self.group = rank, world_size, group
        self.device = fsdp.node_local_device()
        # FSDP warns for every view it returns; verl never modifies outputs in place.
        warnings.filterwarnings("ignore", message=".*returned a view tensor.*")
        self.log(f"started (pid {os.getpid()}, device {self.device})")

    def log(self, message: str) -> None:
        print(f"[verl {self.group} rank {self.rank}] {message}", flush=True)

    def node_info(self) -> dict:
        import ray

        logs = []
        for fd in (1, 2):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if os.path.isfile(path) and path not in logs:
                logs.append(path)
        return {"rank": self.rank, "node_ip": ray.util.get_node_ip_address(), "pid": os.getpid(), "logs": logs,
                "actor_id": ray.get_runtime_context().get_actor_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def master_endpoint(self) -> tuple[str, int]:
        import ray

        from verl.distributed.worker_group import free_port

        return ray.util.get_node_ip_address(), free_port()

    def init_process_group(self, master_addr: str, master_port: int, timeout_s: float) -> str:
        if master_addr.startswith("127.") and "GLOO_SOCKET_IFNAME" not in os.environ:
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # a one-machine cluster stays on loopback
        backend = fsdp.init_process_group(self.rank, self.world_size, master_addr, master_port, timeout_s,
                                          self.device)
        self.log(f"joined process group ({backend}, world {self.world_size}, timeout {timeout_s:.0f} s)")
        return backend

    def ping(self) -> int:
        return os.getpid()


def _param_dtype(config, dtype_name: Optional[str] = None) -> Optional[torch.dtype]:
    from verl.models.loading import torch_dtype

    dtype = torch_dtype(dtype_name or config.model.dtype)
    return None if dtype == torch.float32 else dtype


# ---------------------------------------------------------------------------
# The single-process workers, made data-parallel
# ---------------------------------------------------------------------------


class RankShare:
    """Mixin of the sharded Actor / Critic: this rank trains on its share of every mini-batch
    (the loss counts stay the whole mini-batch's). Micro-batching is the config's, never sized
    to this rank's free memory nor halved after an out-of-memory error: every rank must cut
    its share into as many micro-batches as the others (FSDP's collectives run in lockstep)."""

    def __init__(self, *args, rank: int, world_size: int, **kwargs):
        self.rank, self.world_size = rank, world_size
        super().__init__(*args, adapt_to_memory=False, **kwargs)

    def rank_share(self, mini: Batch, micro) -> Batch:
        return dispatch.rank_share(mini, self.rank, self.world_size, micro)


class ShardedActor(RankShare, Actor):
    """Actor whose model is FSDP-sharded: runs its log-prob computation under the root unit's
    forward hooks. FSDP computes in model.dtype itself (MixedPrecisionPolicy): no separate
    parameter copy."""

    param_copy_supported = False

    def _forward(self, mb: Batch, with_entropy: bool, with_sum_pi_squared: bool = False):
        return fsdp.fsdp_forward(self.model, super()._forward, mb, with_entropy, with_sum_pi_squared)


class ShardedCritic(RankShare, Critic):
    """Critic whose value model is FSDP-sharded (its `forward` is the root's own)."""


class TrainableWorker(RankWorker):
    """Shared by the actor and critic ranks: state save/load of `self.role` (an Actor or
    Critic with .model, .optimizer, .scheduler, .generator)."""

    role = None

    def full_state_dict(self) -> Optional[dict]:
        sd = fsdp.full_state_dict(self.role.model)
        return sd if self.rank == 0 else None

    def state_dict(self) -> Optional[dict]:
        """Everything an exact resume needs, gathered (full tensors) on rank 0."""
        model = fsdp.full_state_dict(self.role.model)
        optim = fsdp.full_optimizer_state_dict(self.role.model, self.role.optimizer)
        if self.rank != 0:
            return None
        return {"model": model, "optimizer": optim, "scheduler": self.role.scheduler.state_dict(),
                "generator": self.role.generator.get_state()}

    def load_state_dict(self, state: Optional[dict]) -> None:
        """Rank 0 passes the dict of `state_dict`; the others pass None (broadcast)."""
        state = state or {}
        fsdp.load_full_state_dict(self.role.model, state.get("model", {}))
        fsdp.load_full_optimizer_state_dict(self.role.model, self.role.optimizer, state.get("optimizer", {}))
        self._load_extra(state if self.rank == 0 else None)

    def save_checkpoint(self, path: str) -> None:
        """Sharded: model + optimizer shards (torch.distributed.checkpoint), and the small
        replicated state (scheduler, mini-batch shuffler) from rank 0."""
        fsdp.save_sharded(path, self.role.model, self.role.optimizer)
        if self.rank == 0:
            torch.save({"scheduler": self.role.scheduler.state_dict(), "generator": self.role.generator.get_state()},
                       os.path.join(path, "extra_state.pt"))
        torch.distributed.barrier()

    def load_checkpoint(self, path: str) -> None:
        fsdp.load_sharded(path, self.role.model, self.role.optimizer)
        extra = None
        if self.rank == 0:
            extra = torch.load(os.path.join(path, "extra_state.pt"), map_location="cpu", weights_only=True)
        self._load_extra(extra)

    def _load_extra(self, extra: Optional[dict]) -> None:
        """Scheduler and generator state from rank 0 to every rank (they must stay identical:
        every rank draws the same mini-batches)."""
        box = [extra]
        torch.distributed.broadcast_object_list(box, src=0)
        extra = box[0]
        if extra:
            self.role.scheduler.load_state_dict(extra["scheduler"])
            self.role.generator.set_state(extra["generator"])

    def update(self, batch: Batch) -> dict:
        """Partial metrics (this rank's token share); the driver sums them."""
        return self.role.update(batch)


class ActorWorker(TrainableWorker):
    def build(self, config) -> int:
        from verl.models.loading import load_causal_lm, torch_dtype

        torch.manual_seed(config.seed)
        pure = config.model.mixed_precision == "pure"  # the sharded weights themselves in model.dtype
        model = load_causal_lm(config.model, torch_dtype(config.model.dtype) if pure else torch.float32,
                               device_type=self.device.type)
        fsdp.broadcast_from_rank0(model, self.device)
        fsdp.shard_model(model, self.device, _param_dtype(config))
        self.role = ShardedActor.from_config(config, self.device, model, rank=self.rank, world_size=self.world_size)
        self.config = config
        n = sum(p.numel() for p in model.parameters())
        self.log(f"actor ready: {type(model).__name__}, {n} parameters in this rank's shards")
        return n

    def compute_log_probs(self, batch: Batch):
        return self.role.compute_log_probs(batch)

    def compute_log_probs_and_sum_pi_squared(self, batch: Batch):
        return self.role.compute_log_probs_and_sum_pi_squared(batch)

    def weight_buckets_to(self, replicas: list, leaders: list[int], bucket_mb: float, dtype: str) -> dict:
        """Gather the full weights bucket by bucket (every rank takes part) and, on the ranks
        in `leaders`, stream each bucket to the matching rollout replica.

        A replica that dies meanwhile is left out of the rest of the sync, and this rank keeps
        gathering: the other ranks are in the same all-gathers and would otherwise wait for it until the
        process group's timeout. Its index comes back under "lost_replicas" ({replica: why}) for the
        driver to name it (or restart it, rollout.restart_on_failure)."""
        import time

        import ray

        from verl.models.loading import torch_dtype

        start = time.perf_counter()
        mine = [(j, rep) for j, (rep, lead) in enumerate(zip(replicas, leaders)) if lead == self.rank]
        lost: dict[int, str] = {}

        def to_live_replicas(send) -> None:  # send(replica handle) -> ObjectRef
            refs = [(j, send(rep)) for j, rep in mine if j not in lost]
            for j, ref in refs:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    lost[j] = f"Ray: {type(exc).__name__}"
                    self.log(f"rollout replica {j} died during the weight sync ({lost[j]})")

        to_live_replicas(lambda rep: rep.begin_weights.remote())
        n_bytes = n_buckets = 0
        for bucket in fsdp.weight_buckets(self.role.model, int(bucket_mb * 2**20), torch_dtype(dtype)):
            if len(lost) < len(mine):
                ref = ray.put(bucket)
                to_live_replicas(lambda rep: rep.add_weights.remote(ref))
            n_bytes += sum(t.numel() * t.element_size() for _, t in bucket)
            n_buckets += 1
        to_live_replicas(lambda rep: rep.finish_weights.remote())
        return {"timing_s/update_weights": time.perf_counter() - start, "rollout/weight_sync_bytes": float(n_bytes),
                "rollout/weight_sync_buckets": float(n_buckets), "lost_replicas": lost}


class CriticWorker(TrainableWorker):
    def build(self, config) -> int:
        from verl.workers.critic import load_value_model

        torch.manual_seed(config.seed)
        model = load_value_model(config.critic, config.model, self.device.type)
        fsdp.broadcast_from_rank0(model, self.device)  # the value head is drawn at random: make ranks agree
        fsdp.shard_model(model, self.device, _param_dtype(config, config.critic.dtype))
        self.role = ShardedCritic.from_config(config, self.device, model, rank=self.rank, world_size=self.world_size)
        self.log("critic ready")
        return sum(p.numel() for p in model.parameters())

    def compute_values(self, batch: Batch) -> torch.Tensor:
        return self.role.compute_values(batch)


class ReferenceWorker(RankWorker):
    def build(self, config) -> int:
        from verl.models.loading import load_causal_lm
        from verl.workers.reference import Reference

        model = load_causal_lm(config.model, torch.float32, device_type=self.device.type)
        # A frozen copy in model.dtype; micro-batches as the driver padded the shares for.
        self.role = Reference.from_config(config, self.device, model, adapt_to_memory=False)
        del model
        fsdp.shard_model(self.role.model, self.device, None)
        self.log("reference ready")
        return sum(p.numel() for p in self.role.model.parameters())

    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        return fsdp.fsdp_forward(self.role.model, self.role.compute_log_probs, batch)


class RewardWorker(RankWorker):
    """A reward manager (e.g. a Hugging Face reward model) scoring this rank's rows. No
    process group: ranks score independently."""

    def build(self, config) -> int:
        from verl.rewards import build_reward_manager

        self.manager = build_reward_manager(config.reward_fn, max_response_length=config.rollout.max_new_tokens)
        self.log("reward model ready")
        return 0

    def score_parts(self, batch: Batch):
        if not len(batch):
            return torch.zeros(0), torch.zeros(0, len(self.manager.components)), {}
        return self.manager.score_parts(batch)
