"""ReplicatedRollout's handling of a lost engine process (verl/distributed/rollout.py), with stand-ins for the
worker groups (no Ray): which failures restart the engines, how often, and what the error says."""

from __future__ import annotations

import pytest

from verl.batch import Batch
from verl.distributed.rollout import ReplicatedRollout
from verl.distributed.worker_group import WorkerDiedError
from verl.rollout.base import SamplingParams


class Group:
    """A rollout worker group whose `generate` raises as a dead rank's would: `fail` marks it broken."""

    def __init__(self, deaths: int = 0):
        self.world_size, self.handles, self.broken, self.deaths, self.calls = 1, [], None, deaths, []

    def call(self, method, *args, per_rank=None):
        self.calls.append(method)
        if self.deaths:
            self.deaths -= 1
            self.broken = "rank 0 died"
            raise WorkerDiedError(f"rollout.{method}: rank 0 died (killed, out of memory or crashed; Ray: ActorDiedError)")
        return [Batch()] if method == "generate" else [None]


class Actor:
    def __init__(self, dies: bool = False):
        self.dies, self.pushes = dies, 0

    def push_weights(self, handles, leaders, bucket_mb, dtype):
        self.pushes += 1
        if self.dies:  # an actor rank's death: its own group is the broken one, not the rollout group
            raise WorkerDiedError("actor.weight_buckets_to: rank 1 died (killed, out of memory or crashed)")
        return {"rollout/weight_sync_buckets": 1.0}, {}


def _engine(group, actor, restart: bool, rebuilt: list):
    def rebuild():
        fresh = Group()
        rebuilt.append(fresh)
        return fresh

    return ReplicatedRollout(group, actor, leaders=[0], bucket_mb=1.0, dtype="bfloat16",
                             rebuild=rebuild if restart else None, say=lambda line: None)


def test_a_lost_engine_is_restarted_once_synced_and_the_call_made_again():
    rebuilt: list = []
    actor = Actor()
    engine = _engine(Group(deaths=1), actor, restart=True, rebuilt=rebuilt)
    engine.generate(Batch(), SamplingParams())
    assert len(rebuilt) == 1 and actor.pushes == 1 and rebuilt[0].calls == ["generate"]
    rebuilt[0].deaths = 1  # a second death in the same run: no second restart
    with pytest.raises(WorkerDiedError, match=r"^vLLM engine process lost \(it was restarted once already\): "
                                              r"rollout.generate: rank 0 died"):
        engine.generate(Batch(), SamplingParams())


def test_without_restart_the_error_names_the_engine():
    with pytest.raises(WorkerDiedError, match=r"^vLLM engine process lost: rollout.sleep: rank 0 died"):
        _engine(Group(deaths=1), Actor(), restart=False, rebuilt=[]).sleep()


def test_an_actor_rank_lost_during_the_weight_push_is_not_taken_for_the_engine():
    rebuilt: list = []
    with pytest.raises(WorkerDiedError, match=r"^actor.weight_buckets_to: rank 1 died"):
        _engine(Group(), Actor(dies=True), restart=True, rebuilt=rebuilt).sync_weights()
    assert rebuilt == []  # nothing restarted for another group's death
