"""A sleeping engine maps its memory back only after PyTorch's cached blocks are released.

On the H200 (2026-12-01) GRPO with vLLM sleep mode, 32 prompts x 8 samples of up to 1024 tokens,
crashed at the first wake-up: the update's micro-batches, sized by the token budget to ~96 GiB of
activations, were freed but stayed reserved by PyTorch's caching allocator, and vLLM's KV cache
could not be mapped again (`CUDA Error: out of memory at cumem_allocator.cpp:163`). The engines'
wake-up now calls `token_io.release_cached_blocks()` (torch.cuda.empty_cache) first.

No CPU engine sleeps (vLLM's CPU build has no sleep mode, SGLang no CPU build), so these tests
drive the wake-up of each backend with a recording stand-in for the engine and check the order of
the calls; the GPU tests (tests/gpu/test_gpu_vllm.py, tests/gpu/test_gpu_sglang.py) run the real ones.
"""

from __future__ import annotations

import pytest
import torch

from verl.rollout import sglang_rollout, token_io, vllm_rollout


class Recorder:
    """Stands in for the engine: records each call with its tags."""

    def __init__(self, calls: list):
        self.calls = calls

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append((name, tuple(kwargs.get("tags", ()))))


@pytest.fixture
def calls(monkeypatch):
    calls: list = []
    for module in (vllm_rollout, sglang_rollout):
        monkeypatch.setattr(module, "release_cached_blocks", lambda: calls.append(("release_cached_blocks", ())))
        monkeypatch.setattr(module, "free_gib", lambda: 10.0)
        monkeypatch.setattr(module, "hf_named_weights", lambda source: [])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    return calls


def test_vllm_wake_up_releases_cached_blocks_before_mapping_weights_and_kv_cache(calls):
    r = vllm_rollout.VLLMRollout.__new__(vllm_rollout.VLLMRollout)  # no engine start: the calls are recorded
    r.llm, r.asleep, r.sleep_level, r._source = Recorder(calls), True, 2, object()
    r._pending_metrics, r.last_sleep_metrics = {}, {}
    r._reload = lambda weights: calls.append(("reload", ()))
    r.wake_up()
    assert calls == [("release_cached_blocks", ()), ("wake_up", ("weights",)), ("reload", ()),
                     ("wake_up", ("kv_cache",))]
    assert not r.asleep


def test_vllm_sync_into_a_sleeping_engine_releases_cached_blocks_first(calls):
    r = vllm_rollout.VLLMRollout.__new__(vllm_rollout.VLLMRollout)
    r.llm, r.asleep, r.sleep_level, r._source = Recorder(calls), True, 2, object()
    r._pending_metrics, r.last_sleep_metrics = {}, {}
    r._reload = lambda weights: calls.append(("reload", ())) or 0
    r.load_weights([])
    assert calls[0] == ("release_cached_blocks", ()) and ("wake_up", ("kv_cache",)) in calls


def test_sglang_wake_up_releases_cached_blocks_before_resuming_memory(calls):
    r = sglang_rollout.SGLangRollout.__new__(sglang_rollout.SGLangRollout)
    r.engine, r.asleep, r.released, r._source = Recorder(calls), True, ("weights", "kv_cache"), object()
    r._pending_metrics, r.last_sleep_metrics = {}, {}
    r._reload = lambda weights, flush=True: calls.append(("reload", ()))
    r.wake_up()
    assert calls == [("release_cached_blocks", ()), ("resume_memory_occupation", ("weights",)), ("reload", ()),
                     ("resume_memory_occupation", ("kv_cache",)), ("flush_cache", ())]


def test_release_cached_blocks_empties_the_cache_once_cuda_is_in_use(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    token_io.release_cached_blocks()  # CUDA never used in this process: nothing to release
    assert emptied == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    token_io.release_cached_blocks()
    assert emptied == [1]
