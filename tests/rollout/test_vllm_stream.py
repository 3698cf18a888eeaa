"""Streaming generation on vLLM's CPU build (verl/rollout/vllm_stream.py): a batch collected from the
step loop is the batch LLM.generate gives, batches in flight together are each handed back whole, a
weight sync between two steps changes the rest of a generation (and only the rest), and every wait
ends (abort, timeout). Trainer-level tests of async_training.streaming are in test_async_training.py.

Same tiny model as test_vllm_rollout.py (hidden 128, random weights, float32); its engine starts with
the prefix cache off, as the trainer starts a streaming engine.
"""

from __future__ import annotations

import pytest
import torch

from greedy_paths import min_top2_gap
from test_vllm_rollout import hf_model, tokenizer  # noqa: F401  (fixtures, on this module's llama_path)
from test_vllm_rollout import actor_log_probs, perturbed, prompt_batch, responses_of
from verl.config import RolloutConfig
from verl.rollout.base import SamplingParams
from verl.rollout.vllm_rollout import VLLMRollout
from verl.rollout.vllm_stream import VLLMStream


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory) -> str:
    from verl.models.tiny import build_tiny_model

    return build_tiny_model("llama", str(tmp_path_factory.mktemp("tiny128-stream")), hidden=128, pretrain_steps=0)


@pytest.fixture(scope="module")
def engine(llama_path, tokenizer, hf_model):
    cfg = RolloutConfig(kv_cache_gb=0.25, max_model_len=256, max_num_seqs=16, seed=1)
    eng = VLLMRollout(llama_path, tokenizer, cfg, dtype="float32", device="cpu", enable_prefix_caching=False)
    eng.sync_weights(hf_model)
    return eng


@pytest.fixture()
def stream(engine):
    s = VLLMStream(engine)
    yield s
    s.abort_all()
    engine.extra_sampling_kwargs = {}


def test_a_collected_batch_is_the_batch_llm_generate_gives(engine, stream, tokenizer):
    """Same requests (same per-request seeds: the call counter set alike), same engine: the step loop
    only drives what LLM.generate drives, so the tokens are the same and the log-probs agree."""
    prompts, sampling = prompt_batch(tokenizer), SamplingParams(n=2, max_new_tokens=8, seed=5)
    engine._calls = 0
    ref = engine.generate(prompts, sampling)
    engine._calls = 0
    out = stream.generate(prompts, sampling)
    assert responses_of(out) == responses_of(ref)
    assert torch.allclose(out.rollout_log_probs, ref.rollout_log_probs, atol=1e-6)
    assert out.response_text == ref.response_text and out.truncated == ref.truncated
    assert [e["policy_version"] for e in out.extra] == [0] * 6  # 3 prompts x 2 samples, none spanned a sync
    assert [e["policy_version_last"] for e in out.extra] == [0] * 6
    assert stream.in_flight() == 0


def test_batches_in_flight_together_are_each_handed_back_whole(engine, stream, tokenizer, hf_model):
    """Batch A (8 tokens) and batch B (16 tokens) share the engine's steps: collecting B runs A to its
    end too, so A is then handed back without another step; each equals its own greedy generation."""
    engine.extra_sampling_kwargs = {"ignore_eos": True}
    a_prompts, b_prompts = prompt_batch(tokenizer), prompt_batch(tokenizer, ["Once upon a time", "The sky is"])
    a_sampling, b_sampling = SamplingParams(n=2, max_new_tokens=8, greedy=True), SamplingParams(n=1, max_new_tokens=16,
                                                                                                  greedy=True)
    alone_a, alone_b = engine.generate(a_prompts, a_sampling), engine.generate(b_prompts, b_sampling)
    ticket_a = stream.submit(a_prompts, a_sampling)
    ticket_b = stream.submit(b_prompts, b_sampling)
    assert stream.in_flight() == 2
    out_b, stats = stream.collect(ticket_b)
    # B's collect took 16 steps (step 1 prefills both batches and draws token 1, each later step one token).
    # Requests in the engine before each step: A's 6 (3 prompts x n=2) and B's 2 for steps 1-8, then B's 2
    # alone for steps 9-16 -> (8 * 8 + 8 * 2) / 16 = 5.0.
    assert stats["steps"] == 16
    assert stats["requests"] / stats["steps"] == pytest.approx(5.0)
    assert 0 < stats["step_s"] and 0 <= stats["hook_s"]
    assert ticket_a.done  # finished during B's steps, kept for it
    out_a, stats = stream.collect(ticket_a)
    assert stats["steps"] == 0  # handed back without a step
    for out, alone in ((out_a, alone_a), (out_b, alone_b)):
        assert min_top2_gap(hf_model, alone) > 1e-3  # no near-tie: batch composition cannot swap a token
        assert responses_of(out) == responses_of(alone)
        assert out.response_mask.sum(dim=1).tolist() == alone.response_mask.sum(dim=1).tolist()
    assert len(out_a) == 6 and len(out_b) == 2 and stream.in_flight() == 0


def test_a_sync_between_steps_changes_the_rest_of_a_generation(engine, stream, tokenizer, hf_model):
    """The hook runs before every step; step 1 is the prefill and the first token, each later step one
    token. Syncing other weights before step 4 leaves tokens 1-3 drawn by the old weights: their engine
    log-probs equal the old model's (float32, ~1e-6); from token 4 on they do not (the perturbation moves
    log-probs by ~1, far above rounding), and every sample records the versions 0 -> 1."""
    engine.extra_sampling_kwargs = {"ignore_eos": True}
    other = perturbed(hf_model, scale=0.05)
    calls = {"n": 0}

    def hook():
        calls["n"] += 1
        if calls["n"] == 4:
            stream.sync_weights(other, version=1)

    try:
        out, _ = stream.collect(stream.submit(prompt_batch(tokenizer), SamplingParams(n=1, max_new_tokens=12,
                                                                                   greedy=True)), between_steps=hook)
    finally:
        stream.sync_weights(hf_model, version=0)  # the module's other tests use the original weights
    old = actor_log_probs(hf_model, out)
    diff = (out.rollout_log_probs - old).abs()
    assert calls["n"] == 12  # one hook call per step, one step per token
    assert diff[:, :3].max() < 1e-4, diff[:, :3]
    assert diff[:, 3:].mean() > 0.1, diff[:, 3:]
    assert [(e["policy_version"], e["policy_version_last"]) for e in out.extra] == [(0, 1)] * 3


def test_abort_frees_the_engine_and_a_collect_after_it_says_so(engine, stream, tokenizer):
    ticket = stream.submit(prompt_batch(tokenizer), SamplingParams(n=2, max_new_tokens=64))
    assert engine.llm.llm_engine.has_unfinished_requests()
    stream.abort_all()
    assert not engine.llm.llm_engine.has_unfinished_requests() and stream.in_flight() == 0
    with pytest.raises(RuntimeError, match="already collected or aborted"):
        stream.collect(ticket)


def test_a_collect_that_runs_past_its_timeout_raises(engine, stream, tokenizer):
    engine.extra_sampling_kwargs = {"ignore_eos": True}
    ticket = stream.submit(prompt_batch(tokenizer), SamplingParams(n=1, max_new_tokens=64))
    with pytest.raises(TimeoutError, match=r"not done after 0 s of streaming generation \(3 requests left\)"):
        stream.collect(ticket, timeout_s=0)
