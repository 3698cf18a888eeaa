"""Partial rollouts (verl/rollout/partial.py, async_training.partial_rollout): a generation in
segments picks up a weight update between segments, records the version switch per token, keeps
each token's engine log-prob from the weights that produced it, and gives the one-call result when
no update lands."""

from __future__ import annotations

import pytest
import torch

from conftest import small_overrides
from greedy_paths import assert_greedy_agree, model_forward
from test_hf_rollout_engine_copy import load, prompt_batch
from verl import create_trainer, load_config
from verl.batch import Batch
from verl.errors import ConfigError
from verl.models.loading import load_tokenizer
from verl.rollout.base import SamplingParams, assemble_rollout
from verl.rollout.hf_rollout import HFRollout
from verl.rollout.partial import generate_in_segments
from verl.rollout.token_io import unpadded_rows

EOS = 20


class CountingTokenizer:
    pad_token_id, eos_token_id = 0, EOS

    def batch_decode(self, rows, skip_special_tokens=False):
        return [" ".join(map(str, r)) for r in rows]


class CountingEngine:
    """Each token is the previous one + 1 (so a sample's tokens do not depend on how it is cut),
    EOS at 20; the log-prob of every token is -(version + 1) / 10: which weights made it."""

    def __init__(self):
        self.tokenizer, self.version, self.calls = CountingTokenizer(), 0, []

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        rows = prompts.repeat(sampling.n)
        self.calls.append((len(rows), sampling.n, sampling.max_new_tokens))
        responses, logps, finished = [], [], []
        for ctx in unpadded_rows(rows.input_ids, rows.attention_mask):
            out, last = [], ctx[-1]
            while len(out) < sampling.max_new_tokens and last != EOS:
                last += 1
                out.append(last)
            responses.append(out)
            logps.append([-(self.version + 1) / 10] * len(out))
            finished.append(last == EOS)
        return assemble_rollout(rows, responses, logps, self.tokenizer, sampling.max_new_tokens, finished=finished)


def counting_prompts() -> Batch:
    # prompts [5, 6] and [15], left-padded; n = 2 samples of each below
    ids = torch.tensor([[5, 6], [0, 15]])
    return Batch(input_ids=ids, attention_mask=(ids > 0).long(), prompt_text=["a", "b"], ground_truth=["x", "y"],
                 data_source=["s", "s"], extra=[{"k": 1}, {"k": 2}], group_id=["g0", "g1"])


def test_segments_join_tokens_log_probs_and_version_switches():
    engine = CountingEngine()
    versions = iter([0, 1, 2])  # before segment 1, 2, 3

    def current_version():
        engine.version = next(versions)
        return engine.version

    sampling = SamplingParams(n=2, max_new_tokens=9, temperature=1.0)
    batch, stats = generate_in_segments(engine, counting_prompts(), sampling, 4, current_version, engine.tokenizer)
    # Prompt [5, 6]: 7..15, never EOS: segments of 4 + 4 + 1 tokens from versions 0, 1, 2; truncated.
    # Prompt [15]: 16..19 in segment 1, then 20 (EOS) in segment 2 from version 1: finished.
    a = list(range(7, 16))
    b = [16, 17, 18, 19, 20]
    assert unpadded_rows(batch.responses, batch.response_mask) == [a, a, b, b]
    assert [e["version_switches"] for e in batch.extra] == [[[0, 0], [4, 1], [8, 2]]] * 2 + [[[0, 0], [4, 1]]] * 2
    expect_a = [-0.1] * 4 + [-0.2] * 4 + [-0.3]
    expect_b = [-0.1] * 4 + [-0.2] + [0.0] * 4  # right padding: 0
    assert torch.allclose(batch.rollout_log_probs, torch.tensor([expect_a, expect_a, expect_b, expect_b]))
    assert batch.truncated == [True, True, False, False]
    assert stats == {"segments": 3, "switched": 4}
    # the engine calls: 4 samples x 4 tokens (n = 2), 4 continuations of 4 (n = 1), 2 continuations of 1
    assert engine.calls == [(4, 2, 4), (4, 1, 4), (2, 1, 1)]
    # one call's layout: the prompt block as given, the rows' fields kept, samples of a prompt adjacent
    assert torch.equal(batch.input_ids[:, :2], counting_prompts().repeat(2).input_ids)
    assert batch.group_id == ["g0", "g0", "g1", "g1"] and [e["k"] for e in batch.extra] == [1, 1, 2, 2]
    assert batch.ground_truth == ["x", "x", "y", "y"] and batch.response_text[2] == "16 17 18 19"  # EOS dropped


def test_engine_seconds_are_summed_over_the_segments():
    class TimedEngine(CountingEngine):
        def metrics(self):  # what an in-process engine reports of its last call
            return {"rollout/engine_call_s": 0.5, "rollout/around_engine_s": 0.25}

    engine = TimedEngine()
    _, stats = generate_in_segments(engine, counting_prompts(), SamplingParams(n=2, max_new_tokens=9), 4,
                                    lambda: 0, engine.tokenizer)
    assert stats["segments"] == 3  # 3 calls: 3 x 0.5 s in the engine, 3 x 0.25 s around it
    assert stats["rollout/engine_call_s"] == 1.5 and stats["rollout/around_engine_s"] == 0.75


def test_no_update_means_the_one_call_result():
    engine = CountingEngine()
    sampling = SamplingParams(n=2, max_new_tokens=9)
    whole = engine.generate(counting_prompts(), sampling)
    cut, stats = generate_in_segments(engine, counting_prompts(), sampling, 3, lambda: 0, engine.tokenizer)
    for name in ("input_ids", "attention_mask", "responses", "response_mask", "rollout_log_probs"):
        assert torch.equal(getattr(cut, name), getattr(whole, name)), name
    assert cut.truncated == whole.truncated and cut.response_text == whole.response_text
    assert all(e["version_switches"] == [[0, 0]] for e in cut.extra) and stats["switched"] == 0


def test_segmented_greedy_generation_on_a_real_model_is_the_one_call_generation(tiny_qwen2):
    """HF backend, float32 on the CPU: the continuation is fed the sampled ids themselves, and its
    logits come from a fresh prefill instead of the incremental KV cache (float32 sums in another
    order: ~1e-6, bounded here at 1e-4). Two computation paths, so tokens are compared up to a near
    tie (tests/greedy_paths.py), not bitwise."""
    model = load(tiny_qwen2, torch.float32)
    tok = load_tokenizer(tiny_qwen2)
    from verl.config import RolloutConfig

    engine = HFRollout(model, tok, RolloutConfig())
    prompts = prompt_batch(tok)
    greedy = SamplingParams(n=1, max_new_tokens=12, greedy=True)
    whole = engine.generate(prompts, greedy)
    cut, stats = generate_in_segments(engine, prompts, greedy, 5, lambda: 0, tok)
    assert stats["segments"] >= 2
    assert_greedy_agree(model_forward(model), cut, whole, lp_tol=1e-4, forward_tol=1e-4)


def test_partial_rollouts_in_async_training_switch_versions_within_the_bound(tmp_path, tiny_gpt2):
    cfg = load_config(None, small_overrides(tmp_path / "run", **{
        "algorithm.name": "grpo", "training.total_steps": 4, "training.batch_size": 2, "training.micro_batch_size": 4,
        "rollout.max_new_tokens": 12, "rollout.hf_weight_copy": "true", "rollout.tis_cap": 2.0,
        "async_training.enable": "true", "async_training.max_staleness": 1,
        "async_training.partial_rollout": "true", "async_training.segment_tokens": 2}))
    trainer = create_trainer(cfg)
    seen = []
    for _ in range(4):
        m = trainer.step()
        step = trainer.global_step - 1  # the update this batch trained into
        assert m["async/partial_segments"] >= 1 and m["async/staleness_max"] <= 1
        for e, length in zip(trainer.run.last_batch.extra, trainer.run.last_batch.response_mask.sum(1).tolist()):
            switches = e["version_switches"]
            assert switches[0] == [0, e["policy_version"]]  # staleness counts from the oldest tokens
            starts, versions = [s for s, _ in switches], [v for _, v in switches]
            assert starts == sorted(starts) and all(s % 2 == 0 and s < max(length, 1) for s in starts[1:])
            assert versions == sorted(versions) and step - versions[0] <= 1 and versions[-1] <= step
            seen.append(len(switches))
        for key in ("pg_loss", "actor/grad_norm", "rollout_corr/rollout_is_mean"):
            assert torch.isfinite(torch.tensor(float(m[key]))), key
    trainer.run.close()
    assert seen  # whether an update landed mid-generation depends on timing: the invariants hold either way


def test_partial_rollouts_change_nothing_at_staleness_zero(tmp_path, tiny_gpt2):
    """At max_staleness 0 no update can land during a generation: the one-call path, bit for bit."""
    def run(name, **extra):
        cfg = load_config(None, small_overrides(tmp_path / name, **{
            "algorithm.name": "grpo", "training.total_steps": 2, "training.batch_size": 2,
            "training.micro_batch_size": 4, "async_training.enable": "true", "async_training.max_staleness": 0,
            **extra}))
        trainer = create_trainer(cfg)
        metrics = [trainer.step() for _ in range(2)]
        params = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
        trainer.run.close()
        return metrics, params

    plain_m, plain_p = run("plain")
    cut_m, cut_p = run("cut", **{"async_training.partial_rollout": "true", "async_training.segment_tokens": 2})
    assert all(torch.equal(plain_p[n], cut_p[n]) for n in plain_p)
    assert [m["reward"] for m in plain_m] == [m["reward"] for m in cut_m]
    assert not any("async/partial_segments" in m for m in cut_m)


def test_partial_rollouts_refused_with_multi_turn(tmp_path):
    with pytest.raises(ConfigError, match="async_training.partial_rollout: not with multi-turn"):
        load_config(None, small_overrides(tmp_path / "mt", **{
            "async_training.enable": "true", "async_training.partial_rollout": "true",
            "rollout.hf_weight_copy": "true", "rollout.tools": "[calculator]"}))
