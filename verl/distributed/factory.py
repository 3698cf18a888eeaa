"""`build_distributed_workers(config, tokenizer)`: the Ray worker groups a run needs, laid
out on the cluster as `distributed.*` says, behind the same methods as the single-process
workers (the trainer's loop does not change).

Placement (N = distributed.nnodes x distributed.devices_per_node devices, one bundle each):

    train pool (N bundles)   actor + reference (+ vLLM replicas) always; critic when
                             distributed.colocate_critic; reward model when
                             distributed.colocate_reward. Colocated roles are separate
                             processes on the same device, each asking for 1/k of it.
    critic pool (N bundles)  the critic, when not colocated
    reward pool (N bundles)  the reward model, when not colocated (CPU bundles when
                             reward_fn.device is cpu)

Rollout (`distributed.rollout`):
    driver   generation on the driver with `actor.model` (a copy holding the gathered
             weights, refreshed after every update); HF or a single vLLM engine. The
             default on CPU, and for small models.
    workers  one vLLM engine per replica on the train pool (rollout.name: vllm).
    auto     workers when rollout.name is vllm and the cluster has GPUs, else driver.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from verl.algorithms.requirements import needs_critic, needs_reference
from verl.errors import ConfigError
from verl.workers.critic_factory import critic_has_own_tokenizer
from verl.distributed.worker_group import DistributedError, ResourcePool, WorkerGroup, connect

_LIVE: list["DistributedWorkers"] = []


@dataclass
class DistributedWorkers:
    actor: object
    reference: Optional[object] = None
    critic: Optional[object] = None
    reward: Optional[object] = None  # None: the reward manager runs on the driver
    rollout: Optional[object] = None  # None: the trainer builds its engine on `actor.model`
    groups: list = field(default_factory=list)
    pools: list = field(default_factory=list)
    owns_ray: bool = False

    def shutdown(self) -> None:
        """Stop every rank process and free the reserved devices (and Ray, if we started it)."""
        for g in self.groups:
            g.kill()
        for p in self.pools:
            p.remove()
        self.groups, self.pools = [], []
        if self in _LIVE:
            _LIVE.remove(self)
        if self.owns_ray:
            import ray

            ray.shutdown()


def shutdown_all() -> None:
    for w in list(_LIVE):
        w.shutdown()


def _use_gpu(config) -> bool:
    import ray

    if config.device == "cpu":
        return False
    if config.device.startswith("cuda"):
        return True
    return ray.cluster_resources().get("GPU", 0) > 0


def _reward_has_model(rf) -> bool:
    if rf.type == "huggingface_rm":
        return True
    return any(_reward_has_model(c) for c in rf.components if hasattr(c, "type"))


def _rollout_mode(config, use_gpu: bool) -> str:
    mode = config.distributed.rollout
    if mode == "auto":
        mode = "workers" if (config.rollout.name == "vllm" and use_gpu) else "driver"
    return mode  # 'workers' with rollout.name other than vllm is refused when the config loads


def _model_path_for_replicas(config, tokenizer, actor) -> str:
    from verl.models.tiny import resolve_model_name

    path = resolve_model_name(config.model.name)
    if config.model.gguf_file or not os.path.isdir(path):
        from verl.rollout.vllm_weights import export_hf_folder

        path = export_hf_folder(actor.model, tokenizer)  # weights are synced right after anyway
    return path


def _replica_devices(leaders: list[int], tp: int, actor_info: list[dict]) -> list:
    """Per replica, the GPU ids its engine sees (TP > 1: those of its actor ranks, one node) or None."""
    visible = []
    for lead in leaders:
        members = actor_info[lead: lead + tp]
        if len({m["node_ip"] for m in members}) > 1:
            raise DistributedError(f"rollout replica of actor ranks {lead}..{lead + tp - 1} spans several "
                                   "nodes; rollout.tensor_model_parallel_size must fit in one node")
        visible.append([g for m in members for g in m["gpu_ids"]] if tp > 1 else None)
    return visible


def build_distributed_workers(config, tokenizer) -> DistributedWorkers:
    from verl.distributed import groups as G
    from verl.distributed import workers as W
    from verl.distributed.rollout import ReplicatedRollout, RolloutReplicaWorker, replica_layout

    d, a = config.distributed, config.algorithm
    n = d.nnodes * d.devices_per_node
    need_ref, need_critic = needs_reference(a), needs_critic(a)
    remote_reward = _reward_has_model(config.reward_fn)
    if need_critic and critic_has_own_tokenizer(config, tokenizer):
        raise ConfigError("critic.name: a critic with its own tokenizer (text critic) runs only with "
                          "distributed.backend: none for now")
    owns_ray = connect(d)
    use_gpu = _use_gpu(config)
    rollout_mode = _rollout_mode(config, use_gpu)
    leaders = replica_layout(n, config.rollout.tensor_model_parallel_size) if rollout_mode == "workers" else []

    out = DistributedWorkers(actor=None, owns_ray=owns_ray)
    _LIVE.append(out)
    try:
        train = ResourcePool("train", n, use_gpu, d.timeout_s)
        out.pools.append(train)
        on_train = ["actor"] + (["reference"] if need_ref else []) + \
            (["critic"] if need_critic and d.colocate_critic else []) + \
            (["reward"] if remote_reward and d.colocate_reward else []) + \
            (["rollout"] if rollout_mode == "workers" else [])
        share = 1.0 / len(on_train)

        def pool_for(role: str, gpu: bool) -> tuple[ResourcePool, float]:
            if role in on_train:
                return train, share
            pool = ResourcePool(role, n, gpu, d.timeout_s)
            out.pools.append(pool)
            return pool, 1.0

        specs = [("actor", W.ActorWorker, train, share, True)]
        if need_ref:
            specs.append(("reference", W.ReferenceWorker, train, share, True))
        if need_critic:
            specs.append(("critic", W.CriticWorker, *pool_for("critic", use_gpu), True))
        if remote_reward:
            rm_gpu = use_gpu and not str(config.reward_fn.device).startswith("cpu")
            specs.append(("reward", W.RewardWorker, *pool_for("reward", rm_gpu), False))
        groups = {}
        for name, cls, pool, sh, pg in specs:  # spawn everything first: processes start in parallel
            groups[name] = WorkerGroup(name, cls, pool, sh, d.timeout_s, process_group=pg)
            out.groups.append(groups[name])
        for g in groups.values():
            g.start()
        pending = [(g, g.submit("build", config)) for g in groups.values()]
        for g, refs in pending:
            g.wait(refs, "build")

        out.actor = G.ActorGroup(groups["actor"], config, eager_copy=rollout_mode == "driver")
        out.reference = G.ReferenceGroup(groups["reference"], config) if need_ref else None
        out.critic = G.CriticGroup(groups["critic"], config) if need_critic else None
        out.reward = G.RewardGroup(groups["reward"]) if remote_reward else None

        if rollout_mode == "workers":
            path = _model_path_for_replicas(config, tokenizer, out.actor)
            visible = _replica_devices(leaders, config.rollout.tensor_model_parallel_size, groups["actor"].info)

            def start_replicas() -> WorkerGroup:
                group = WorkerGroup("rollout", RolloutReplicaWorker, train, share, d.timeout_s,
                                    process_group=False, slots=leaders).start()
                out.groups[:] = [g for g in out.groups if g.name != "rollout"] + [group]
                group.call("build", config, path, config.model.tokenizer or config.model.name, per_rank=visible)
                return group

            out.rollout = ReplicatedRollout(start_replicas(), out.actor, leaders, d.weight_bucket_mb,
                                            config.model.dtype,
                                            rebuild=start_replicas if config.rollout.restart_on_failure else None)
            out.rollout.sync_weights()
        elif config.rollout.restart_on_failure:
            raise ConfigError("rollout.restart_on_failure: distributed.rollout: auto chose 'driver' (the engine in "
                              "the trainer's process: no GPU, or rollout.name is not vllm), where there is no engine "
                              "process to restart; set distributed.rollout: workers with rollout.name: vllm")
    except BaseException:
        out.shutdown()
        raise
    return out
