"""Asynchronous training under Ray (distributed.backend: ray, 2 FSDP actor ranks on CPU): the rollout
(the driver's engine, fed by the producer thread) runs beside the trainer's worker group. Staleness 0
is the synchronous Ray run bit for bit (same computations in the same order: the producer waits for
every update); staleness 1 keeps its bound and version tags while both sides call the same worker
group from two threads (their calls reach every rank in one order, so collectives pair up); and a
rank that dies mid-run stops the run with a clear error within distributed.timeout_s, not a hang.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

pytestmark = pytest.mark.timeout(1800)  # three 2-rank Ray runs on a loaded 2-core machine

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402,F401  (the test extra installs it: a missing one must fail, not skip)

from conftest import small_overrides  # noqa: E402
from verl import create_trainer, load_config  # noqa: E402

STEPS = 3
KEYS = ("reward", "pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "entropy")


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    from verl.models.tiny import build_tiny_model

    return build_tiny_model("llama", str(tmp_path_factory.mktemp("llama-async-ray")), hidden=64, pretrain_steps=0)


def _trainer(tmp_path, tag, model, **extra):
    over = {"model.name": model, "algorithm.name": "grpo", "training.total_steps": 10, "training.batch_size": 2,
            "rollout.n": 2, "training.mini_batch_size": 4, "training.micro_batch_size": 2, "training.lr": 1e-2,
            "rollout.tis_cap": 2.0, "data.baseline_prompt": "null", "checkpoint.save_dir": str(tmp_path / tag),
            "distributed.backend": "ray", "distributed.devices_per_node": 2, "distributed.timeout_s": 600}
    over.update(extra)
    return create_trainer(load_config(None, small_overrides(tmp_path, **over)))


def _close(trainer) -> None:
    """One Ray trainer at a time (its placement group is named): stop its workers before the next."""
    from verl.distributed import shutdown_all

    trainer.run.close()
    shutdown_all()


def _steps(trainer, n=STEPS):
    metrics, versions = [], []
    for _ in range(n):
        metrics.append(trainer.step())
        versions.append((trainer.global_step - 1, [e.get("policy_version") for e in trainer.run.last_batch.extra]))
    return metrics, versions


@pytest.fixture(scope="module")
def sync_run(ray_local, tmp_path_factory, llama):
    trainer = _trainer(tmp_path_factory.mktemp("sync"), "sync", llama)
    metrics, _ = _steps(trainer)
    weights = trainer.actor.full_state_dict()
    _close(trainer)
    return metrics, weights


def test_staleness_zero_under_ray_is_the_synchronous_ray_run_bit_for_bit(sync_run, tmp_path, llama):
    trainer = _trainer(tmp_path, "k0", llama, **{"async_training.enable": "true", "async_training.max_staleness": 0})
    metrics, versions = _steps(trainer)
    weights = trainer.actor.full_state_dict()
    _close(trainer)
    sync_metrics, sync_weights = sync_run
    for name, value in sync_weights.items():
        assert torch.equal(value, weights[name]), name
    for s, a in zip(sync_metrics, metrics):
        for key in KEYS:
            assert s[key] == a[key], key
    assert all(v == [step] * len(v) for step, v in versions)
    assert all(m["async/staleness_max"] == 0 for m in metrics)


def test_staleness_one_under_ray_and_a_dead_rank_stops_the_run(ray_local, tmp_path, llama):
    trainer = _trainer(tmp_path, "k1", llama, **{"async_training.enable": "true", "async_training.max_staleness": 1,
                                                 "rollout.hf_weight_copy": "true", "distributed.timeout_s": 120,
                                                 "async_training.timeout_s": 120})
    metrics, versions = _steps(trainer, 4)
    staleness = [step - v[0] for step, v in versions]
    assert staleness[0] == 0 and all(s in (0, 1) for s in staleness), staleness
    # Batch i+1 starts generating while batch i computes its log-probs on the ranks, before update i:
    # one version old. (It would be 0 everywhere if the two sides took turns.)
    assert 1 in staleness, staleness
    assert all(len(set(v)) == 1 for _, v in versions)
    assert [m["async/staleness_max"] for m in metrics] == [float(s) for s in staleness]
    assert all(torch.isfinite(torch.tensor(m["pg_loss"])) for m in metrics)

    # Kill one actor rank while the producer may be using the group (weight gather for its next batch).
    pid = trainer.actor.group.info[1]["pid"]
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        for _ in range(3):
            trainer.step()
    waited = time.monotonic() - started
    text = f"{type(caught.value).__name__}: {caught.value}"
    assert "actor" in text and ("died" in text or "unusable" in text or "rollout failed" in text), text
    assert waited < 120 + 60, waited  # within distributed.timeout_s (plus the step in flight), never a hang
    _close(trainer)


def test_partial_rollouts_under_ray(ray_local, tmp_path, llama):
    """async_training.partial_rollout with the driver's engine: the segments' syncs between generation
    requests gather the weights from the ranks like the producer's own; every sample's versions stay
    within the bound and start at its policy_version."""
    trainer = _trainer(tmp_path, "partial", llama, **{
        "async_training.enable": "true", "async_training.max_staleness": 1, "rollout.hf_weight_copy": "true",
        "async_training.partial_rollout": "true", "async_training.segment_tokens": 2, "rollout.max_new_tokens": 8,
        "async_training.timeout_s": 120})
    metrics, versions = _steps(trainer, 3)
    for (step, tags), m in zip(versions, metrics):
        assert m["async/partial_segments"] >= 1 and step - tags[0] <= 1
        assert all(torch.isfinite(torch.tensor(float(m[k]))) for k in KEYS)
    for e in trainer.run.last_batch.extra:
        vs = [v for _, v in e["version_switches"]]
        assert vs[0] == e["policy_version"] and vs == sorted(vs) and vs[-1] <= trainer.global_step - 1
    _close(trainer)


@pytest.fixture(scope="module")
def llama128(tmp_path_factory) -> str:
    """vLLM's CPU build needs a head size of 32 or more: hidden 128, 4 heads."""
    from verl.models.tiny import build_tiny_model

    return build_tiny_model("llama", str(tmp_path_factory.mktemp("llama128-async-ray")), hidden=128, pretrain_steps=0)


def test_staleness_one_with_the_vllm_replica_group(ray_local, tmp_path, llama128):
    """The producer thread feeds a vLLM engine in its own replica process (distributed.rollout:
    workers) while the actor group updates: the bound holds, batches are one version old, and the
    replica's weights follow the updates (the bucketed sync between its generations)."""
    import vllm  # noqa: F401  (installed by the CPU install script: a missing one must fail, not skip)

    trainer = _trainer(tmp_path, "vllm_k1", llama128, **{
        "rollout.name": "vllm", "distributed.rollout": "workers", "rollout.kv_cache_gb": 0.25,
        "distributed.weight_bucket_mb": 0.5, "async_training.enable": "true", "async_training.max_staleness": 1,
        "distributed.timeout_s": 300, "async_training.timeout_s": 300})
    try:
        metrics, versions = _steps(trainer, 4)
    finally:
        _close(trainer)
    staleness = [step - v[0] for step, v in versions]
    assert staleness[0] == 0 and all(s in (0, 1) for s in staleness) and 1 in staleness, staleness
    assert [m["async/staleness_max"] for m in metrics] == [float(s) for s in staleness]
    for s, m in zip(staleness, metrics):
        assert all(torch.isfinite(torch.tensor(float(m[k]))) for k in KEYS), m
        if s == 0:  # generated by the weights being trained: the replica was synced
            assert m["rollout/logprob_diff"] < 1e-3, m["rollout/logprob_diff"]
