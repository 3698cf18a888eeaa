"""Beyond one device: Ray places and drives the workers, FSDP2 shards the models, vLLM
replicas generate. The only package that knows about Ray and torch.distributed.

    fsdp.py          process group, fully_shard of decoder layers + root, sharded/full state
    dispatch.py      balanced row splits per rank, equal micro-batch counts, gather, metrics
    worker_group.py  Ray: connect, placement groups, N rank actors, calls with deadlines,
                     dead/stuck-worker errors with the worker's last log lines
    workers.py       rank side: ActorWorker, CriticWorker, ReferenceWorker, RewardWorker
    groups.py        driver side: ActorGroup, CriticGroup, ReferenceGroup, RewardGroup
                     (the single-process workers' methods, run by the ranks)
    rollout.py       one vLLM engine per replica, weights streamed from the shards in buckets
    factory.py       build_distributed_workers(config, tokenizer)

Selected by `distributed.backend: ray`; see docs/distributed.md.
"""

from verl.distributed.factory import DistributedWorkers, build_distributed_workers, shutdown_all
from verl.distributed.worker_group import DistributedError, WorkerDiedError, WorkerRaisedError, WorkerTimeoutError

__all__ = ["DistributedWorkers", "build_distributed_workers", "shutdown_all", "DistributedError",
           "WorkerDiedError", "WorkerRaisedError", "WorkerTimeoutError"]
