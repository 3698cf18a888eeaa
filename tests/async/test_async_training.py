"""Asynchronous training (verl/trainer/experience_source.py): staleness 0 is the synchronous run bit
for bit, the staleness bound and version tags hold, importance weights are applied, a resume is
exact, and a failing or hung rollout stops the run with a clear error."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.errors import ConfigError

BASE = {"algorithm.name": "grpo", "training.total_steps": 3, "training.batch_size": 2, "training.micro_batch_size": 4,
        "training.lr": 1e-2, "rollout.tis_cap": 2.0}
KEYS = ("reward", "pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "entropy", "rollout_corr/rollout_is_mean")


def _run(tmp_path, name, steps=3, **extra):
    cfg = load_config(None, small_overrides(tmp_path / name, **{**BASE, "training.total_steps": steps, **extra}))
    trainer = create_trainer(cfg)
    metrics, versions = [], []
    for _ in range(steps):
        m = trainer.step()
        metrics.append(m)
        versions.append((trainer.global_step - 1, [e.get("policy_version") for e in trainer.run.last_batch.extra]))
    params = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    trainer.run.close()
    return metrics, params, versions


def test_staleness_zero_is_the_synchronous_trainer_bit_for_bit(tmp_path, tiny_gpt2):
    sync_m, sync_p, _ = _run(tmp_path, "sync")
    async_m, async_p, versions = _run(tmp_path, "async", **{"async_training.enable": "true",
                                                             "async_training.max_staleness": 0})
    for name, value in sync_p.items():
        assert torch.equal(value, async_p[name]), name
    for s, a in zip(sync_m, async_m):
        for key in KEYS:
            assert s[key] == a[key], key
    assert all(v == [step] * len(v) for step, v in versions)  # every sample from the current weights
    assert all(m["async/staleness_max"] == 0 for m in async_m)


def test_staleness_bound_and_version_tags(tmp_path, tiny_gpt2):
    metrics, _, versions = _run(tmp_path, "k1", steps=4, **{"async_training.enable": "true",
                                                             "async_training.max_staleness": 1,
                                                             "rollout.hf_weight_copy": "true"})
    # Batch i+1 is generated while batch i trains: from the weights after update i-1 (one version old),
    # or after update i when the producer's sync waited for that update to end. Never older.
    staleness = [step - v[0] for step, v in versions]
    assert staleness[0] == 0 and all(s in (0, 1) for s in staleness), staleness
    assert all(len(set(v)) == 1 for _, v in versions)  # one version per batch, recorded on every sample
    assert [m["async/staleness_max"] for m in metrics] == [float(s) for s in staleness]
    assert all(m["async/dropped_samples"] == 0 for m in metrics)
    for s, m in zip(staleness, metrics):
        if s == 1:  # one update old: the engine's log-probs differ from pi_old, the weights are not all 1
            assert abs(m["rollout_corr/rollout_is_mean"] - 1.0) > 1e-6


def test_staleness_one_on_the_vllm_engine(tmp_path, tiny_qwen2):
    """The path of the H200 benchmark (benchmarks/async_grpo.py --engine vllm), on vLLM's CPU build:
    the producer thread generates on the in-process engine while the trainer updates; the engine's
    weights follow the updates through the lock (a batch from the current weights has the engine's
    log-probs equal to pi_old's)."""
    metrics, params, versions = _run(tmp_path, "vllm_k1", steps=4, **{
        "model.name": tiny_qwen2, "rollout.name": "vllm", "rollout.kv_cache_gb": 0.25,
        "async_training.enable": "true", "async_training.max_staleness": 1})
    staleness = [step - v[0] for step, v in versions]
    # the producer starts batch i+1 as soon as batch i is handed over, long before update i ends
    assert staleness[0] == 0 and all(s in (0, 1) for s in staleness) and 1 in staleness, staleness
    for s, m in zip(staleness, metrics):
        for key in KEYS:
            assert torch.isfinite(torch.tensor(float(m[key]))), (key, m[key])
        if s == 0:  # float32 on both sides: equal up to rounding
            assert m["rollout/logprob_diff"] < 1e-3, m["rollout/logprob_diff"]
        else:  # one update old: the importance weights are not all 1
            assert abs(m["rollout_corr/rollout_is_mean"] - 1.0) > 1e-6, m["rollout_corr/rollout_is_mean"]
    assert [m["async/staleness_max"] for m in metrics] == [float(s) for s in staleness]


def test_staleness_above_zero_needs_an_engine_with_its_own_weights(tmp_path):
    with pytest.raises(ConfigError, match="rollout.hf_weight_copy: true"):
        load_config(None, small_overrides(tmp_path, **{"async_training.enable": "true"}))


def test_resume_in_async_mode_is_exact(tmp_path, tiny_gpt2):
    extra = {"async_training.enable": "true", "async_training.max_staleness": 0, "checkpoint.save_full_every": 2}
    _, whole, _ = _run(tmp_path, "whole", steps=4, **extra)
    _run(tmp_path, "parts", steps=2, **extra)
    cfg = load_config(None, small_overrides(tmp_path / "parts", **{**BASE, "training.total_steps": 4, **extra,
                                                                    "checkpoint.resume": "auto"}))
    trainer = create_trainer(cfg)
    assert trainer.global_step == 2
    trainer.train()
    for name, p in trainer.actor.model.named_parameters():
        assert torch.equal(p.detach(), whole[name]), name


def test_a_failing_rollout_stops_the_run_with_its_error(tmp_path, tiny_gpt2):
    cfg = load_config(None, small_overrides(tmp_path, **{**BASE, "async_training.enable": "true",
                                                         "async_training.max_staleness": 0}))
    trainer = create_trainer(cfg)
    engine = trainer.rollout._engine
    calls = {"n": 0}
    real = engine.generate

    def flaky(prompts, sampling):  # the producer's second batch fails (validation calls do not count)
        if threading.current_thread().name == "verl-async-rollout":
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError("the engine died")
        return real(prompts, sampling)

    engine.generate = flaky
    trainer.step()
    with pytest.raises(RuntimeError, match="asynchronous rollout failed: OSError: the engine died"):
        trainer.step()
    trainer.run.close()


def test_a_hung_rollout_times_out(tmp_path, tiny_gpt2):
    cfg = load_config(None, small_overrides(tmp_path, **{**BASE, "async_training.enable": "true",
                                                         "async_training.max_staleness": 0,
                                                         "async_training.timeout_s": 2}))
    trainer = create_trainer(cfg)
    engine = trainer.rollout._engine
    real = engine.generate

    def hung(prompts, sampling):  # the producer's generation hangs (the baseline answer does not)
        if threading.current_thread().name == "verl-async-rollout":
            time.sleep(30)
        return real(prompts, sampling)

    engine.generate = hung
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"produced no batch in 2 s \(async_training.timeout_s\)"):
        trainer.step()
    assert time.monotonic() - start < 20
    trainer.experience.stop.set()


# ---------------------------------------------------------------------------
# Streaming (async_training.streaming: the Stream mode of verl/trainer/generation_modes.py), on vLLM's CPU build
# ---------------------------------------------------------------------------

def _vllm(tiny_qwen2, **extra):
    return {"model.name": tiny_qwen2, "rollout.name": "vllm", "rollout.kv_cache_gb": 0.25, **extra}


STREAM = {"async_training.enable": "true", "async_training.streaming": "true"}


def _run_recording(tmp_path, name, steps, **extra):
    """_run, also recording each trained batch's responses and prompts."""
    cfg = load_config(None, small_overrides(tmp_path / name, **{**BASE, "training.total_steps": steps, **extra}))
    trainer = create_trainer(cfg)
    rows = []
    try:
        for _ in range(steps):
            m = trainer.step()
            b = trainer.run.last_batch
            rows.append({"m": m, "responses": b.responses[b.response_mask.bool()].tolist(), "prompts": b.prompt_text,
                         "first": [e.get("policy_version") for e in b.extra],
                         "last": [e.get("policy_version_last") for e in b.extra], "step": trainer.global_step - 1,
                         "longest": int(b.response_mask.sum(dim=1).max())})
        params = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    finally:
        trainer.run.close()
    return rows, params


def resume_after_step_2(tmp_path, extra) -> tuple[list, dict]:
    """Run 2 of 4 steps in tmp_path/parts (its step-2 checkpoint: save_full_every 2 in `extra`), resume it
    with checkpoint.resume auto and train steps 3-4: (the prompts of each, the weights after them)."""
    _run_recording(tmp_path, "parts", 2, **extra)
    cfg = load_config(None, small_overrides(tmp_path / "parts", **{**BASE, "training.total_steps": 4, **extra,
                                                                    "checkpoint.resume": "auto"}))
    trainer = create_trainer(cfg)
    assert trainer.global_step == 2
    resumed = []
    try:
        for _ in range(2):
            trainer.step()
            resumed.append(trainer.run.last_batch.prompt_text)
        params = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    finally:
        trainer.run.close()
    return resumed, params


def test_streaming_at_staleness_zero_is_the_synchronous_vllm_trainer(tmp_path, tiny_qwen2, monkeypatch):
    """k = 0: nothing is submitted ahead, each batch is one submit and collect on the current weights.
    The streaming engine starts with its prefix cache off; the synchronous run here does too (the one
    engine setting streaming changes), so both engines compute the same requests, with the same seeds, in
    the same steps: only the loop that drives them differs (LLM.generate's or the stream's). So the run is
    the synchronous one bit for bit, weights and metrics."""
    from verl.rollout import in_process

    start_args = in_process.engine_start_args

    def without_prefix_cache(model, tokenizer, config):
        return {**start_args(model, tokenizer, config), "enable_prefix_caching": False}

    with monkeypatch.context() as m:
        m.setattr(in_process, "engine_start_args", without_prefix_cache)
        sync, sync_p = _run_recording(tmp_path, "sync", 3, **_vllm(tiny_qwen2))
    stream, stream_p = _run_recording(tmp_path, "stream", 3, **_vllm(tiny_qwen2, **STREAM,
                                                                     **{"async_training.max_staleness": 0}))
    for s, a in zip(sync, stream):
        assert s["responses"] == a["responses"]
        for key in KEYS:
            assert a["m"][key] == s["m"][key], key
        assert a["first"] == a["last"] == [a["step"]] * len(a["first"])  # every sample from the current weights
        assert a["m"]["async/stream_prefetched"] == 0 and a["m"]["async/staleness_max"] == 0
        # one batch alone in the engine: step 1 prefills and draws token 1, each later step one token, so
        # the collect takes as many steps as the longest response has tokens
        assert a["m"]["async/stream_steps"] == a["longest"], (a["m"]["async/stream_steps"], a["longest"])
    for name, value in sync_p.items():
        assert torch.equal(value, stream_p[name]), name


def test_streaming_submits_ahead_within_the_bound_and_tags_versions(tmp_path, tiny_qwen2):
    rows, _ = _run_recording(tmp_path, "k1", 5, **_vllm(tiny_qwen2, **STREAM, **{"async_training.max_staleness": 1}))
    for r in rows:
        first, last, step = r["first"], r["last"], r["step"]
        assert all(step - 1 <= f <= step for f in first), (step, first)  # at most one update old
        assert all(f <= v <= step for f, v in zip(first, last)), (step, first, last)  # a sync only moves forward
        assert r["m"]["async/staleness_max"] == float(step - min(first))
        assert r["m"]["async/stream_switched_samples"] == float(sum(f != v for f, v in zip(first, last)))
        assert r["m"]["async/dropped_samples"] == 0
        for key in KEYS:
            assert torch.isfinite(torch.tensor(float(r["m"][key]))), key
    # batch i + 1 enters the engine while batch i generates (after update i - 1). Batch 1 needs version 0,
    # which the engine holds before batch 0's first step: it is submitted ahead in every run, whatever the timing
    assert rows[1]["m"]["async/stream_prefetched"] == 1, [r["m"]["async/stream_prefetched"] for r in rows]


def test_streaming_resume_trains_the_prompts_not_yet_trained(tmp_path, tiny_qwen2):
    """The checkpoint at step 2 is written while batch 3 (or 2 and 3) were drawn ahead: the resume
    starts from the loader position before the first batch not trained, so steps 3-4 train the same
    prompts as the run that went straight through."""
    extra = _vllm(tiny_qwen2, **STREAM, **{"async_training.max_staleness": 1, "checkpoint.save_full_every": 2})
    whole, _ = _run_recording(tmp_path, "whole", 4, **extra)
    resumed, _ = resume_after_step_2(tmp_path, extra)
    assert resumed == [whole[2]["prompts"], whole[3]["prompts"]]


@pytest.mark.parametrize("extra, message", [
    ({"async_training.streaming": "true"}, "async_training.streaming: is a mode of asynchronous training"),
    ({**STREAM, "rollout.hf_weight_copy": "true"}, "drives the in-process vLLM engine; rollout.name is 'hf'"),
    ({**STREAM, "rollout.name": "vllm", "async_training.partial_rollout": "true"}, "partial_rollout: false"),
    ({**STREAM, "rollout.name": "vllm", "algorithm.dynamic_sampling.enable": "true"}, "dynamic_sampling"),
])
def test_streaming_refuses_what_it_cannot_serve(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, small_overrides(tmp_path, **extra))


def test_a_failing_streaming_rollout_stops_the_run_with_its_error(tmp_path, tiny_qwen2, monkeypatch):
    from verl.rollout import vllm_stream

    cfg = load_config(None, small_overrides(tmp_path, **{**BASE, **_vllm(tiny_qwen2, **STREAM)}))
    trainer = create_trainer(cfg)
    real = vllm_stream.VLLMStream.collect
    calls = {"n": 0}

    def flaky(self, ticket, between_steps=None, timeout_s=3600.0):  # the producer's second batch fails
        if threading.current_thread().name == "verl-async-rollout":
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError("the engine died")
        return real(self, ticket, between_steps, timeout_s)

    monkeypatch.setattr(vllm_stream.VLLMStream, "collect", flaky)
    try:
        trainer.step()
        with pytest.raises(RuntimeError, match="asynchronous rollout failed: OSError: the engine died"):
            trainer.step()
    finally:
        trainer.run.close()


@pytest.mark.parametrize("extra, message", [
    ({"async_training.engine_priority": "high"}, "engine_priority: sets the stream of the asynchronous producer"),
    ({"async_training.enable": "true", "rollout.hf_weight_copy": "true", "async_training.engine_priority": "high",
      "device": "cpu"}, "engine_priority: high is a CUDA stream priority and device is cpu"),
    ({"async_training.engine_priority": "low"}, "async_training.engine_priority"),
])
def test_engine_priority_is_refused_where_it_means_nothing(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, small_overrides(tmp_path, **extra))


def test_engine_stream_helpers_do_nothing_at_normal_priority_or_off_cuda():
    """The producer's stream, the update's event and the wait are CUDA-only, and only at high priority
    (on CUDA: tests/gpu/test_gpu_vllm.py's streaming run with engine_priority high)."""
    from verl.trainer.engine_stream import producer_stream, update_event, wait_for

    for device, priority in (("cpu", "high"), ("cpu", "normal"), ("cuda", "normal")):
        with producer_stream(device, priority) as stream:
            assert stream is None
        assert update_event(device, priority) is None
    wait_for(None)  # no event: nothing to wait for


def test_the_producers_sync_waits_for_an_update_at_most_timeout_s():
    # an update holding the actor's weights longer than async_training.timeout_s: the producer's sync
    # gives up with a TimeoutError naming the setting instead of waiting forever; without `wait` it keeps
    # the engine's weights at once
    from verl.trainer.weight_sync import WeightSync

    weights = WeightSync(engine=None, model=None, timeout_s=0.2, device=None, priority="normal", version=4)
    weights.synced = 3
    with weights._updating:  # the update in progress
        assert weights.sync_to_newest(wait=False) == 3
        with pytest.raises(TimeoutError, match="async_training.timeout_s"):
            weights.sync_to_newest(wait=True)
