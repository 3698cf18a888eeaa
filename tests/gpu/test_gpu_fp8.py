"""rollout.quantization: fp8 on a CUDA GPU (run on the H100/H200: pytest -m gpu tests/gpu/test_gpu_fp8.py).

Every test here is marked `gpu` (tests/conftest.py skips them without CUDA). The CPU versions are
tests/rollout/test_vllm_fp8.py (engine, sync, scales) and tests/rollout/test_fp8.py / tests/rollout/test_fp8_config.py (the
quantization itself, the plan, the config). What only the GPU shows: vLLM's CUDA FP8 layers (W8A8: the
activations are quantized per 1 x 128 group too) hold exactly our FP8 weights and scales after each sync
(read back in checkpoint layout, dequantized and compared bit for bit with our round trip, quantized with
the power-of-two scales vLLM's DeepGEMM kernel requantizes to where the engine uses it), the engine's
log-probs follow a sync, and a GRPO run through the CLI logs the engine-vs-actor mismatch every step.

Model: the tiny llama at hidden 256 (head 32, one KV head), briefly pretrained. Its q/k/v cannot be cut into
128 x 128 blocks (k and v have 32 rows), so the fused qkv layer stays in bf16 (vLLM's ignored_layers) while
o_proj, gate/up and down_proj are FP8: both paths of the plan. Tolerances: one engine and one HF model in
bf16 with the same weights differ by < 0.05 a token on these models (tests/gpu/test_gpu_vllm.py); FP8 weights and
activations add their rounding (2^-4 relative), so the engine vs the bf16 actor stays below the FP8 warning
level training.logprob_diff_warn 0.25 (FP8_DIFF_WARN), asserted; a sync to weights perturbed by 0.05 moves
the log-probs by several times that, so after it the engine is closer to the new actor than to the old one.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [TESTS, os.path.join(TESTS, "rollout")]  # greedy_paths, test_vllm_rollout's helpers

import test_vllm_rollout as cpu_tests  # noqa: E402  (its helpers; pytest collects no tests through this name)
from verl.config import RolloutConfig  # noqa: E402
from verl.config.training import FP8_DIFF_WARN  # noqa: E402
from verl.rollout.base import SamplingParams  # noqa: E402
from verl.rollout.fp8 import round_trip  # noqa: E402
from verl.rollout.vllm_rollout import VLLMRollout, logprob_diff  # noqa: E402

pytestmark = pytest.mark.gpu

PROMPTS = ["I love reinforcement", "What is the capital of France? Paris is the", "Tell me a story",
           "Write a short poem about the sea.", "What is 17 + 25? The answer is"]
FP8_LAYERS = ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")  # per decoder layer
BF16_LAYERS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")  # k/v: 32 rows, no 128-row block


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory) -> str:
    from verl.models.tiny import build_tiny_model

    return build_tiny_model("llama", str(tmp_path_factory.mktemp("gpu-fp8-llama")), hidden=256, pretrain_steps=200)


@pytest.fixture(scope="module")
def tok(llama_path):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(llama_path)
    t.padding_side = "left"
    return t


@pytest.fixture(scope="module")
def hf_model(llama_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(llama_path, dtype=torch.bfloat16).to("cuda").eval()


@pytest.fixture(scope="module")
def engine(llama_path, tok, hf_model):
    cfg = RolloutConfig(quantization="fp8", max_model_len=256, max_num_seqs=32, seed=1, gpu_memory_utilization=0.15,
                        enable_sleep_mode=True, enforce_eager=True)
    e = VLLMRollout(llama_path, tok, cfg, dtype="bfloat16", device="cuda")
    e.sync_weights(hf_model)  # as InProcessEngine.from_actor: the placeholder weights are replaced at once
    return e


def actor_log_probs(model, batch) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids.cuda(), attention_mask=batch.attention_mask.cuda(),
                       position_ids=batch.position_ids.cuda()).logits.float()
    p = batch.prompt_length
    lp = torch.log_softmax(logits[:, p - 1:-1], dim=-1).gather(-1, batch.responses.cuda().unsqueeze(-1)).squeeze(-1)
    return lp.cpu()


def diff_to(model, batch) -> float:
    return logprob_diff(batch.rollout_log_probs, actor_log_probs(model, batch), batch.response_mask)


def sample(engine, tok):
    return engine.generate(cpu_tests.prompt_batch(tok, PROMPTS), SamplingParams(n=4, max_new_tokens=16, seed=5))


def perturbed(model, scale: float = 0.05, seed: int = 0):
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_((torch.randn(p.shape, generator=gen) * scale).to(p.device, p.dtype))
    return other


def planned(engine) -> list:
    return sorted(engine.fp8.quantized)


def test_the_engine_holds_fp8_linear_layers_and_keeps_the_rest_in_bf16(engine):
    params = engine.llm.collective_rpc(lambda worker: {n: p.dtype for n, p in
                                                       worker.model_runner.get_model().named_parameters()})[0]
    for i in range(2):
        assert params[f"model.layers.{i}.self_attn.o_proj.weight"] == torch.float8_e4m3fn
        assert params[f"model.layers.{i}.mlp.gate_up_proj.weight"] == torch.float8_e4m3fn
        assert params[f"model.layers.{i}.mlp.down_proj.weight"] == torch.float8_e4m3fn
        assert params[f"model.layers.{i}.mlp.down_proj.weight_scale_inv"] == torch.float32
        assert params[f"model.layers.{i}.self_attn.qkv_proj.weight"] == torch.bfloat16  # ignored_layers
        assert params[f"model.layers.{i}.input_layernorm.weight"] == torch.bfloat16
        assert all(f"model.layers.{i}.{n}" in engine.fp8.kept for n in BF16_LAYERS)
    assert params["model.embed_tokens.weight"] == torch.bfloat16 and params["model.norm.weight"] == torch.bfloat16
    # the LM head is tied to the embeddings here: vLLM holds it as the embedding's bf16 tensor
    assert params.get("lm_head.weight", torch.bfloat16) == torch.bfloat16
    assert planned(engine) == sorted(f"model.layers.{i}.{n}.weight" for i in range(2) for n in FP8_LAYERS)
    assert engine.weight_reload == "layerwise"


def _check_weights_equal_round_trip(engine, model):
    """The engine's FP8 weights dequantized with its scales == our round trip of `model`'s, bit for bit
    (with the scale format the plan found the engine to keep: power-of-two scales where its DeepGEMM
    kernel requantizes to them, verl/rollout/fp8.py)."""
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    read = engine.read_weights(planned(engine), shapes)
    assert sorted(read) == planned(engine), "a planned FP8 weight was not in checkpoint layout in the engine"
    weights = dict(model.state_dict())
    for name, held in read.items():
        assert held.dtype == torch.float32
        ours = round_trip(weights[name].float(), pow2_scales=engine.fp8.pow2_scales).cpu()
        assert torch.equal(held, ours), (name, float((held != ours).float().mean()))


def engine_scales(engine) -> dict:
    """The engine's down_proj scales ({HF name: float32 [N/128, K/128]}), as it holds them."""
    return engine.llm.collective_rpc(lambda worker: {n: p.detach().float().cpu() for n, p in
                                                     worker.model_runner.get_model().named_parameters()
                                                     if n.endswith("down_proj.weight_scale_inv")})[0]


def is_pow2(t: torch.Tensor) -> bool:
    return bool((t > 0).all() and torch.equal(torch.exp2(torch.log2(t).round()), t))


def test_the_engines_dequantized_weights_equal_our_round_trip(engine, hf_model):
    from verl.rollout.sync_check import verify_sync

    _check_weights_equal_round_trip(engine, hf_model)
    problem, compared = verify_sync(engine, hf_model)  # the trainer's check: FP8 weights compared too
    assert problem is None and compared > 0


def test_the_plans_scale_format_is_the_one_the_engine_keeps(engine, hf_model):
    """The plan's pow2_scales (read off the engine's kernels at its start) is what the engine does to float
    scales: a sync with amax / 448 scales comes out with power-of-two scales and other weights where the
    plan says the engine requantizes (vLLM's DeepGEMM kernel, UE8M0), and as sent where it says not."""
    from verl.rollout.fp8 import quantize_blockwise

    plan = engine.fp8
    weights = dict(hf_model.state_dict())
    try:
        engine.fp8 = dataclasses.replace(plan, pow2_scales=False)
        engine.sync_weights(hf_model)
        held = engine_scales(engine)
        assert sorted(held) == [f"model.layers.{i}.mlp.down_proj.weight_scale_inv" for i in range(2)]
        for name, scale in held.items():
            sent = quantize_blockwise(weights[name.replace("_scale_inv", "")].float())[1].cpu()
            assert not is_pow2(sent), name  # amax / 448: no power of two on this model
            if plan.pow2_scales:
                assert is_pow2(scale) and not torch.equal(scale, sent), name
            else:
                assert torch.equal(scale, sent), name
    finally:
        engine.fp8 = plan
        engine.sync_weights(hf_model)
    _check_weights_equal_round_trip(engine, hf_model)
    assert all(is_pow2(s) == plan.pow2_scales for s in engine_scales(engine).values())


def test_a_sync_moves_the_engine_to_the_new_weights(engine, hf_model, tok):
    from verl.rollout.sync_check import verify_sync

    before = sample(engine, tok)
    to_actor = diff_to(hf_model, before)
    assert to_actor < FP8_DIFF_WARN, to_actor  # FP8's mismatch stays below its warning level
    new = perturbed(hf_model)
    problem, _ = verify_sync(engine, new)  # not synced yet: the check sees a stale engine
    assert problem is not None and "differ" in problem
    try:
        metrics = engine.sync_weights(new)
        assert metrics["timing_s/update_weights"] > 0
        _check_weights_equal_round_trip(engine, new)
        after = sample(engine, tok)
        to_new, to_old = diff_to(new, after), diff_to(hf_model, after)
        assert to_new < FP8_DIFF_WARN and to_new < 0.5 * to_old, (to_new, to_old)
        assert after.responses.tolist() != before.responses.tolist()
    finally:
        engine.sync_weights(hf_model)
    assert diff_to(hf_model, sample(engine, tok)) < FP8_DIFF_WARN


def test_sleep_and_wake_keep_the_fp8_weights(engine, hf_model, tok):
    """Level 2 (weights released): the wake-up re-syncs from the module, quantizing again."""
    engine.sleep()
    engine.wake_up()
    _check_weights_equal_round_trip(engine, hf_model)


def test_grpo_through_the_cli_with_fp8_rollouts_logs_the_mismatch_every_step(tmp_path, llama_path):
    out = tmp_path / "grpo-fp8"
    proc = subprocess.run(
        [sys.executable, "-m", "verl.cli", "train", f"model.name={llama_path}", "model.dtype=bfloat16",
         "rollout.name=vllm", "rollout.quantization=fp8", "algorithm.name=grpo", "training.total_steps=3",
         "training.batch_size=4", "rollout.max_new_tokens=16", "rollout.enforce_eager=true",
         "rollout.gpu_memory_utilization=0.2", "logging.backends=[jsonl]", "logging.progress_bar=false",
         "device=cuda", "--save_dir", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "linear layers in block FP8" in proc.stdout, proc.stdout[-2000:]
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # measured and corrected on every step under fp8 (logprob_check_every 1, tis_cap 2.0)
        assert 0 < r["rollout/logprob_diff"] < FP8_DIFF_WARN, r
        assert 0 <= r["rollout/engine_kl"] < FP8_DIFF_WARN, r  # k3 KL: second order in the mismatch
        assert "rollout_corr/rollout_is_mean" in r and r["reward/mean"] is not None, r
    assert "warning: step" not in proc.stdout  # the invariants' FP8 level: no spurious warning
