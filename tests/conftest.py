"""Shared fixtures: tiny local models (built once per machine, cached) and small configs."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_SILENT", "true")

# Intra-op threads: 1 (VERL_TEST_THREADS overrides), for this process and every child it starts
# (CLI runs, Ray workers, the vLLM engine), set before torch starts its thread pool. The thread
# count partitions CPU reductions and matmuls (their summation order), so a fixed one takes the
# machine's core count out of every result; tests that compare two computation paths still use
# tolerances that hold at any thread count and ISA. One thread is also the fast choice for these
# tiny models on a shared 2-core machine: test_perf_packing.py took 26 s with 1 thread and 53-102 s
# with 2 under load (OpenMP threads wait for each other at every op).
TEST_THREADS = int(os.environ.get("VERL_TEST_THREADS", "1"))
os.environ["OMP_NUM_THREADS"] = str(TEST_THREADS)
os.environ["MKL_NUM_THREADS"] = str(TEST_THREADS)


def pytest_configure(config):
    import torch

    torch.set_num_threads(TEST_THREADS)  # in case torch was imported before this file


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need a CUDA device: skipped, with that reason, where there is none."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_gpt2() -> str:
    from verl.models.tiny import tiny_model_path

    return tiny_model_path("gpt2")


@pytest.fixture(scope="session")
def tiny_qwen2() -> str:
    from verl.models.tiny import tiny_model_path

    return tiny_model_path("qwen2")


@pytest.fixture(scope="session")
def tiny_llama() -> str:
    from verl.models.tiny import tiny_model_path

    return tiny_model_path("llama")


def small_overrides(tmp_path, **extra) -> list[str]:
    """Overrides for a run that takes a second or two per step on a CPU."""
    base = {
        "training.total_steps": 2, "training.batch_size": 4, "training.micro_batch_size": 2,
        "training.lr": 1e-3, "rollout.max_new_tokens": 8, "logging.backends": "[jsonl]",
        "logging.progress_bar": "false", "checkpoint.save_dir": str(tmp_path / "out"), "device": "cpu",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def capture_first_grads(monkeypatch) -> dict:
    """Record the gradients of the first optimizer step of each role, before it is taken.

    Returns a dict filled during the run: "actor" -> [grad per trainable parameter], "critic"
    -> the same for the critic (a separate critic, or the value head with critic.share_actor).
    Compared before Adam, whose first step ~ lr * sign(g) would blow float rounding in
    near-zero gradients up to lr-sized differences."""
    import verl.workers.update_loop as loop_mod
    from verl.workers.optim import guarded_step

    captured: dict = {}

    def grads(params):
        return [p.grad.detach().clone() for p in params if p.grad is not None]

    def step(pairs, grad_clip):
        # {"actor": (optimizer, params)}, {"critic": ...}, or with critic.share_actor both
        pairs = {role: (opt, list(params)) for role, (opt, params) in pairs.items()}
        for role, (_, params) in pairs.items():
            captured.setdefault(role, grads(params))
        return guarded_step(pairs, grad_clip)

    monkeypatch.setattr(loop_mod, "guarded_step", step)
    return captured


@pytest.fixture(scope="module")
def ray_local():
    """One small local Ray instance for a test module (4 logical CPUs, 200 MB object store, no
    dashboard), its worker groups and Ray shut down at the module's end."""
    import ray

    ray.init(num_cpus=4, object_store_memory=200 * 2**20, include_dashboard=False, log_to_driver=False)
    yield
    from verl.distributed import shutdown_all

    shutdown_all()
    ray.shutdown()
