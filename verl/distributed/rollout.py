"""Rollout at scale: one vLLM engine per replica, replicas side by side (data parallel),
tensor parallel inside a replica (`rollout.tensor_model_parallel_size` devices each).

    replicas = N devices / TP; replica j lives on the bundle of actor rank j * TP and, with
    TP > 1, sees the GPUs of actor ranks j*TP .. j*TP + TP - 1 (one node).

Generation: the prompts are cut into one contiguous chunk per replica; each replica samples
its chunk (n per prompt) and the Batches come back concatenated in prompt order.

Weight sync after each actor update (`sync_weights`): every actor rank takes part in
gathering the full weights from the FSDP shards one tensor at a time; gathered tensors are
grouped into buckets of `distributed.weight_bucket_mb`; actor rank j*TP sends each bucket to
replica j as soon as it is full (one object-store message per bucket). The replica collects
the buckets and hands the whole list to vLLM's in-place `reload_weights` once at the end:
vLLM's layer-wise reload processes a layer when all its weights have arrived, and a partial
reload of a layer would leave it half old, so the reload itself is not split.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import torch

from verl.batch import Batch
from verl.distributed.worker_group import WorkerDiedError, WorkerTimeoutError
from verl.distributed.workers import RankWorker
from verl.rollout.base import RolloutEngine, SamplingParams


class RolloutReplicaWorker(RankWorker):
    """One vLLM engine (one replica)."""

    def build(self, visible_devices: Optional[list[str]], config, model_path: str, tokenizer_name: str) -> int:
        if visible_devices and self.device.type == "cuda":
            # TP > 1: the engine's TP workers use the GPUs of the replica's actor ranks.
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible_devices)
        from verl.models.loading import load_tokenizer
        from verl.rollout.vllm_rollout import VLLMRollout

        m = config.model
        self.tokenizer = load_tokenizer(tokenizer_name, "model.tokenizer", m.trust_remote_code, m.gguf_file)
        self.engine = VLLMRollout(model_path, self.tokenizer, config.rollout, dtype=m.dtype,
                                  device="cuda" if self.device.type == "cuda" else "cpu")
        self._incoming: list = []
        self.log(f"vLLM replica ready ({model_path}, tp {config.rollout.tensor_model_parallel_size})")
        return 0

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        if not len(prompts):
            return Batch()
        return self.engine.generate(prompts, sampling)

    def begin_weights(self) -> None:
        self._incoming = []

    def add_weights(self, bucket: list) -> int:
        self._incoming.extend(bucket)
        return len(self._incoming)

    def finish_weights(self) -> float:
        """Load the collected weights into the engine in place (see module docstring)."""
        start = time.perf_counter()
        load_named_weights(self.engine, self._incoming)
        self._incoming = []
        return time.perf_counter() - start

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()


def load_named_weights(engine, weights: list[tuple[str, torch.Tensor]]) -> None:
    """(HF name, tensor) pairs that arrived from the actor's shards into a replica's VLLMRollout:
    the engine's one load path (VLLMRollout.load_weights), asleep or awake."""
    engine.load_weights(weights)


class ReplicatedRollout(RolloutEngine):
    """The driver's handle on the replicas: same interface as any rollout engine.

    A replica process that dies (or stops answering within distributed.timeout_s) ends the run with
    WorkerDiedError / WorkerTimeoutError naming it, unless `rebuild` is given (rollout.restart_on_failure):
    then, once per run, the replicas are started again, synced from the actor, and the call that failed
    is made again (a generation with the same requests and seeds samples what the lost one would have)."""

    def __init__(self, group, actor, leaders: list[int], bucket_mb: float, dtype: str, rebuild=None,
                 say=print):
        self.group, self.actor, self.leaders = group, actor, leaders
        self.bucket_mb, self.dtype = bucket_mb, dtype
        self.rebuild, self.say = rebuild, say  # rebuild() -> a started, built WorkerGroup of fresh replicas
        self.restarts = 0

    @property
    def num_replicas(self) -> int:
        return self.group.world_size

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        def run():
            parts = prompts.chunk(self.num_replicas)
            return Batch.concat([b for b in self.group.call("generate", sampling, per_rank=parts) if len(b)])

        return self._restarting("generate", run)

    def sync_weights(self, model=None) -> dict:
        """Actor shards -> replicas (the `model` argument, the driver's copy, is not used:
        the weights go from the ranks straight to the replicas)."""
        return self._restarting("sync_weights", self._push)

    def _push(self) -> dict:
        metrics, lost = self.actor.push_weights(self.group.handles, self.leaders, self.bucket_mb, self.dtype)
        if lost:
            j, why = min(lost.items())
            self.group.fail(WorkerDiedError, f"rollout.sync_weights: rank {j} died (killed, out of memory or "
                             f"crashed; {why})", sorted(lost))
        return metrics

    def sleep(self) -> None:
        self._restarting("sleep", lambda: self.group.call("sleep"))

    def wake_up(self) -> None:
        # a restarted group is awake (synced) already: nothing to redo
        self._restarting("wake_up", lambda: self.group.call("wake_up"), redo=False)

    def _restarting(self, what: str, call, redo: bool = True):
        try:
            return call()
        except (WorkerDiedError, WorkerTimeoutError) as exc:
            if not self.group.broken:  # another group's process (an actor rank during the weight push)
                raise
            if self.rebuild is None or self.restarts >= 1:
                once = " (it was restarted once already)" if self.restarts else ""
                raise type(exc)(f"vLLM engine process lost{once}: {exc}") from None
            self.restarts += 1
            self.say(f"warning: vLLM engine process lost: {str(exc).splitlines()[0]}; starting the rollout engines "
                     "again and syncing them from the actor (rollout.restart_on_failure: once per run)")
            start = time.monotonic()
            self.group = self.rebuild()
            synced = self._push()
            self.say(f"rollout engines restarted in {time.monotonic() - start:.0f} s" +
                     (f"; {what} again" if redo and what != "sync_weights" else ""))
            if what == "sync_weights":
                return synced
            return call() if redo else None


def replica_layout(world_size: int, tp: int) -> list[int]:
    """Actor rank that leads (and shares a bundle with) each replica."""
    if tp < 1 or world_size % tp:
        from verl.errors import ConfigError

        raise ConfigError(f"rollout.tensor_model_parallel_size: {tp} must divide the {world_size} devices "
                          "(distributed.nnodes x distributed.devices_per_node)")
    return [j * tp for j in range(world_size // tp)]
