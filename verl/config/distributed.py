"""`distributed` section: Ray + FSDP2 placement (docs/distributed.md). Safe to change on resume."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, key


@dataclass
class DistributedConfig(Section):
    SECTION = "distributed"
    RESUME_SAFE = True
    backend: str = key("none", choices="verl.backends:BACKENDS")  # none | ray
    address: Optional[str] = None  # auto (a running `ray start` cluster) | host:port | local/None (start one here)
    nnodes: int = key(1, ge=1)
    devices_per_node: int = key(1, ge=1)  # data-parallel ranks = nnodes x devices_per_node (GPUs, or CPU processes)
    colocate_critic: bool = True  # critic on the actor's devices, else on devices of its own
    colocate_reward: bool = True  # a reward model (huggingface_rm) on the actor's devices, else its own
    rollout: str = key("auto", choices=("auto", "driver", "workers"))  # workers: one vLLM engine per replica
    weight_bucket_mb: float = key(512.0, gt=0)  # actor -> rollout replicas weight sync message size
    timeout_s: float = key(600.0, gt=0)  # deadline of every call to the workers and of every collective
    num_cpus: Optional[int] = None  # CPUs of a Ray instance started here (address local/None)
    object_store_mb: Optional[int] = None  # its object store size (None = Ray's default)
