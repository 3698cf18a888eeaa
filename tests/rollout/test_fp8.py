"""Block FP8 quantize / dequantize (verl/rollout/fp8.py) against hand-derived values and an independent
reference, and the FP8 plan of a model (verl/rollout/fp8_vllm.py: which linear layers the engine holds in FP8)."""

from __future__ import annotations

import math

import pytest
import torch

from verl.errors import ConfigError
from verl.rollout.fp8 import (BLOCK, FP8_MAX, dequantize_blockwise, expand_scale, quantize_blockwise, round_trip,
                              scale_name)


def reference_quantize(w: torch.Tensor, block: int = BLOCK):
    """Block by block, with Python loops (written apart from the vectorised version): scale = amax / 448
    (1 for an all-zero block), q = fp8(clamp(w / scale))."""
    n, k = w.shape
    nb, kb = math.ceil(n / block), math.ceil(k / block)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    scale = torch.empty(nb, kb)
    for i in range(nb):
        for j in range(kb):
            tile = w[i * block:(i + 1) * block, j * block:(j + 1) * block].float()
            amax = tile.abs().max().item()
            s = amax / 448.0 if amax > 0 else 1.0
            scale[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = \
                (tile / torch.tensor(s, dtype=torch.float32)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, scale


def test_hand_derived_values():
    # One 128 x 128 block whose largest |value| is 4.48: scale = 4.48 / 448 = 0.01. Then
    #   4.48 -> 448 exactly (e4m3's largest value) -> 4.48
    #   0.5  -> 50: e4m3 between 32 and 64 steps by 4 (3 mantissa bits): 48 or 52, 50 is a tie -> even
    #           mantissa 48 (1.5 x 32) -> 0.48
    #   -0.13 -> -13: between 8 and 16 steps by 1 -> -13 exactly -> -0.13
    #   0.0  -> 0
    w = torch.zeros(128, 128)
    w[0, 0], w[0, 1], w[5, 7] = 4.48, 0.5, -0.13
    q, scale = quantize_blockwise(w)
    assert scale.shape == (1, 1) and scale.dtype == torch.float32
    assert scale.item() == pytest.approx(0.01, rel=1e-6)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (128, 128)
    assert q[0, 0].float().item() == 448.0 and q[0, 1].float().item() == 48.0
    assert q[5, 7].float().item() == -13.0 and q[1, 1].float().item() == 0.0
    back = dequantize_blockwise(q, scale)
    assert back[0, 0].item() == pytest.approx(4.48, rel=1e-6)
    assert back[0, 1].item() == pytest.approx(0.48, rel=1e-6)
    assert back[5, 7].item() == pytest.approx(-0.13, rel=1e-6)


def test_each_block_has_its_own_scale():
    # Blocks (0, 0) and (1, 1) of a 256 x 256 matrix hold amax 448 and 0.448: scales 1 and 0.001
    w = torch.zeros(256, 256)
    w[3, 4], w[200, 130], w[10, 200] = 448.0, 0.448, -2.24
    q, scale = quantize_blockwise(w)
    assert scale.shape == (2, 2)
    assert scale[0, 0].item() == pytest.approx(1.0) and scale[1, 1].item() == pytest.approx(0.001)
    assert scale[0, 1].item() == pytest.approx(2.24 / 448) and scale[1, 0].item() == 1.0  # all-zero block
    assert dequantize_blockwise(q, scale)[200, 130].item() == pytest.approx(0.448, rel=1e-6)


@pytest.mark.parametrize("shape", [(256, 384), (130, 200), (1, 7), (300, 128)])
def test_equal_to_the_loop_reference(shape):
    torch.manual_seed(0)
    w = torch.randn(shape) * torch.logspace(-3, 1, shape[1])  # columns of very different sizes
    q, scale = quantize_blockwise(w)
    q_ref, scale_ref = reference_quantize(w)
    assert torch.equal(scale, scale_ref)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))  # bit for bit
    assert q.shape == shape and scale.shape == (math.ceil(shape[0] / 128), math.ceil(shape[1] / 128))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip_error_bound(dtype):
    # Normal e4m3 values (|q| >= 2^-6) are off by at most half a step: 2^-4 relative; subnormal ones by at most
    # half the subnormal step 2^-9, i.e. 2^-10 * scale absolute.
    torch.manual_seed(1)
    w = (torch.randn(384, 256) * 0.02).to(dtype)
    q, scale = quantize_blockwise(w)
    back = dequantize_blockwise(q, scale)
    s = expand_scale(scale, w.shape)
    err = (back - w.float()).abs()
    bound = torch.maximum(w.float().abs() * 2.0 ** -4, s * 2.0 ** -10)
    assert bool((err <= bound * (1 + 1e-6)).all()), float((err / bound).max())
    assert float(err.max()) > 0  # the bound is exercised, not trivially met
    assert round_trip(w).dtype == dtype


def test_block_maxima_survive_exactly_and_padding_is_cut():
    # The largest |value| of each block maps to +-448 (exact in e4m3) and comes back to itself (float32
    # rounding of amax / 448 * 448 aside); 200 x 130 pads to 256 x 256 inside and comes back 200 x 130.
    torch.manual_seed(2)
    w = torch.randn(200, 130)
    q, scale = quantize_blockwise(w)
    assert q.shape == (200, 130) and scale.shape == (2, 2)
    back = dequantize_blockwise(q, scale)
    block = w[:128, :128]
    i = int(block.abs().argmax())
    assert back[:128, :128].flatten()[i].item() == pytest.approx(block.flatten()[i].item(), rel=1e-6)
    assert float(q.float().abs().max()) == FP8_MAX


def test_all_zero_and_tiny_blocks():
    w = torch.zeros(128, 256)
    w[:, 128:] = 1e-30  # a block of tiny values: scale ~2e-33, no overflow, no zero division
    q, scale = quantize_blockwise(w)
    assert scale[0, 0].item() == 1.0 and torch.isfinite(scale).all()
    back = dequantize_blockwise(q, scale)
    assert torch.equal(back[:, :128], torch.zeros(128, 128))
    assert torch.isfinite(back).all() and back[0, 200].item() == pytest.approx(1e-30, rel=2 ** -4)


def test_bad_inputs():
    with pytest.raises(ValueError, match="2-D"):
        quantize_blockwise(torch.zeros(4, 4, 4))
    assert scale_name("model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight_scale_inv"
    with pytest.raises(ValueError):
        scale_name("model.norm.bias")


def test_power_of_two_scales_hand_derived():
    # The block of test_hand_derived_values with pow2_scales: amax / 448 = 0.01 -> 2^ceil(log2 0.01) = 2^-6. Then
    #   4.48 / 2^-6 = 286.72: e4m3 between 256 and 512 steps by 32 -> 288 -> 4.5
    #   0.5 / 2^-6 = 32 exactly -> 0.5;  -0.13 / 2^-6 = -8.32: between 8 and 16 steps by 1 -> -8 -> -0.125
    # and the all-zero block gets vLLM's clamp: 2^ceil(log2(1e-4 / 448)) = 2^-22.
    w = torch.zeros(128, 256)
    w[0, 0], w[0, 1], w[5, 7] = 4.48, 0.5, -0.13
    q, scale = quantize_blockwise(w, pow2_scales=True)
    assert scale.tolist() == [[2.0 ** -6, 2.0 ** -22]]
    back = dequantize_blockwise(q, scale)
    assert (back[0, 0].item(), back[0, 1].item(), back[5, 7].item()) == (4.5, 0.5, -0.125)
    assert torch.equal(back[:, 128:], torch.zeros(128, 128))
    assert torch.equal(round_trip(w, pow2_scales=True), back)


def test_vllms_ue8m0_requantization_leaves_power_of_two_weights_as_they_are():
    # vLLM's DeepGEMM kernel requantizes every loaded block-FP8 weight to power-of-two scales
    # (requant_weight_ue8m0_inplace, run here eagerly on the CPU): our amax / 448 weights come out rounded a
    # second time, our power-of-two ones exactly as sent (verl/rollout/fp8.py), for blocks of any size: all
    # zero, below vLLM's amax clamp 1e-4, ones whose amax lands on a power of two times 448, and ones whose
    # largest q rounds to 224 (vLLM halves their scale and doubles their q: the same weights).
    from vllm.model_executor.layers.quantization.utils.fp8_utils import requant_weight_ue8m0_inplace

    torch.manual_seed(4)
    w = torch.randn(384, 512) * torch.logspace(-7, 1, 512)  # columns from 1e-7 to 10
    w[:128, :128] = 0
    w[128:256, 128:256] *= 1e-6
    w[256, 384] = 448 * 2.0 ** -5  # block (2, 3): amax exactly 448 x a power of two
    w[256:, 384:] = w[256:, 384:].clamp(-14, 14)
    for pow2 in (False, True):
        q, scale = quantize_blockwise(w.bfloat16(), pow2_scales=pow2)
        vq, vscale = q.clone(), scale.clone()
        with torch.compiler.set_stance("force_eager"):
            requant_weight_ue8m0_inplace(vq, vscale)
        same = dequantize_blockwise(vq, vscale) == dequantize_blockwise(q, scale)
        if pow2:  # the weights bit for bit; a block whose largest |q| is 224 gets half the scale, its q doubled
            assert bool(same.all())
            assert bool(((vscale == scale) | (vscale == scale / 2)).all()) and bool((vscale != scale).any())
        else:
            assert float(same.float().mean()) < 0.5, float(same.float().mean())  # most elements moved


# ---------------------------------------------------------------------------
# The plan: which layers go to FP8
# ---------------------------------------------------------------------------


def _llama(hidden=256, heads=2, kv=1, inter=512, vocab=300, tie=True, **extra):
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=2,
                      num_attention_heads=heads, num_key_value_heads=kv, head_dim=hidden // heads,
                      tie_word_embeddings=tie, **extra)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg)


def test_plan_quantizes_block_compatible_linear_layers_only():
    from verl.rollout.fp8_vllm import plan_fp8, quant_config

    plan = plan_fp8(_llama(tie=False))  # q 256, k/v 128, o 256x256, gate/up 512x256, down 256x512
    assert len(plan.quantized) == 2 * 7 and not plan.kept
    assert "model.layers.0.self_attn.k_proj.weight" in plan.quantized
    assert not any("lm_head" in n or "embed" in n or "norm" in n for n in plan.quantized)
    assert quant_config(plan)["weight_block_size"] == [128, 128]


def test_plan_keeps_a_fused_group_whole():
    from verl.rollout.fp8_vllm import plan_fp8

    # head 32, one kv head: k/v have 32 rows, so q (128 rows, block-compatible) stays in bf16 with them
    plan = plan_fp8(_llama(hidden=128, heads=4, inter=256))
    assert "model.layers.0.self_attn.q_proj" in plan.kept and "model.layers.0.self_attn.v_proj" in plan.kept
    assert "model.layers.0.self_attn.q_proj.weight" not in plan.quantized
    assert {"model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.gate_proj.weight",
            "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight"} <= plan.quantized


def test_plan_with_tensor_parallelism_needs_whole_blocks_per_shard():
    from verl.rollout.fp8_vllm import plan_fp8

    plan = plan_fp8(_llama(tie=False), tp=2)  # k/v: 128 rows cannot be cut into two 128-row shards
    assert "model.layers.0.self_attn.k_proj.weight" not in plan.quantized
    assert "model.layers.0.mlp.down_proj.weight" in plan.quantized


def test_plan_refusals_name_the_key():
    from verl.rollout.fp8_vllm import check_supported, plan_fp8

    with pytest.raises(ConfigError, match=r"^rollout.quantization: fp8 found no linear layer"):
        plan_fp8(_llama(hidden=64, heads=2, inter=96))
    cfg = _llama().config
    cfg.num_local_experts = 8
    with pytest.raises(ConfigError, match=r"^rollout.quantization: fp8 is for dense models"):
        check_supported(cfg)


def test_plan_of_a_lora_model_names_the_base_weights():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from verl.rollout.fp8_vllm import plan_fp8

    model = get_peft_model(AutoModelForCausalLM.from_config(_llama().config),
                           LoraConfig(r=4, target_modules=["q_proj", "down_proj"]))
    plan = plan_fp8(model)
    assert "model.layers.0.self_attn.q_proj.weight" in plan.quantized
    assert "model.layers.0.mlp.down_proj.weight" in plan.quantized
    assert not any("lora" in n or "base_layer" in n for n in plan.quantized)


def test_quantized_stream_and_expected_weights():
    from verl.rollout.fp8_vllm import Fp8Plan, dequantized_reads, expected_weight, quantized_stream

    torch.manual_seed(3)
    w, norm = torch.randn(256, 128, dtype=torch.bfloat16), torch.ones(128)
    plan = Fp8Plan(frozenset({"a.weight"}), ())
    out = dict(quantized_stream(iter([("a.weight", w), ("n.weight", norm)]), plan))
    assert out["a.weight"].dtype == torch.float8_e4m3fn and out["a.weight_scale_inv"].shape == (2, 1)
    assert out["n.weight"] is norm
    read = dequantized_reads(plan, out, ["a.weight", "n.weight"])
    assert torch.equal(read["a.weight"], expected_weight(plan, "a.weight", w))  # what the engine holds
    assert not torch.equal(read["a.weight"], w.float())  # ... which is not the actor's bf16 weight
    assert dequantized_reads(plan, out, ["a.weight"], packed=True) == {}  # a repacked layout: not compared


def test_the_plan_takes_the_engines_scale_format():
    # with_engine_scales asks each engine worker (ue8m0_requantizing_layers) for (FP8 linear layers, those whose
    # kernel requantizes to power-of-two scales): all -> the plan quantizes so; none -> amax / 448; a mix, or
    # workers that differ -> refused. The stand-in layers carry the attributes vLLM's kernels have (0.26, 0.32).
    from types import SimpleNamespace

    from verl.rollout.fp8_vllm import (Fp8Plan, expected_weight, quantized_stream, ue8m0_requantizing_layers,
                                       with_engine_scales)

    def layer(dtype, **kernel):
        kernel = SimpleNamespace(**kernel)
        return SimpleNamespace(quant_method=SimpleNamespace(fp8_linear=kernel), weight=torch.zeros(2, 2, dtype=dtype))

    deep_gemm = dict(use_deep_gemm_e8m0=True, is_deep_gemm_supported=True)
    layers = [layer(torch.float8_e4m3fn, **deep_gemm),  # DeepGEMM with UE8M0
              layer(torch.float8_e4m3fn, fallback=SimpleNamespace(**deep_gemm)),  # FlashInfer + DeepGEMM fallback
              layer(torch.float8_e4m3fn, use_deep_gemm_e8m0=True, is_deep_gemm_supported=False),  # no DeepGEMM here
              layer(torch.float8_e4m3fn),  # another kernel (CUTLASS, Triton, the CPU's)
              layer(torch.bfloat16, **deep_gemm),  # an unquantized layer: not counted
              SimpleNamespace(weight=torch.zeros(2))]  # a norm
    worker = SimpleNamespace(model_runner=SimpleNamespace(get_model=lambda: SimpleNamespace(modules=lambda: layers)))
    assert ue8m0_requantizing_layers(worker) == (4, 2)

    def engine(*counts):
        return SimpleNamespace(collective_rpc=lambda fn: list(counts))

    plan = Fp8Plan(frozenset({"a.weight"}), ())
    assert with_engine_scales(plan, engine((4, 4), (4, 4))).pow2_scales
    assert not with_engine_scales(plan, engine((4, 0))).pow2_scales
    assert not with_engine_scales(plan, engine((0, 0))).pow2_scales
    with pytest.raises(RuntimeError, match="2 of the engine's 4 FP8 linear layers requantize"):
        with_engine_scales(plan, engine((4, 2)))
    with pytest.raises(RuntimeError, match="workers differ"):
        with_engine_scales(plan, engine((4, 4), (4, 0)))
    # a power-of-two plan sends such scales, and expects their round trip back
    pow2 = with_engine_scales(plan, engine((4, 4)))
    torch.manual_seed(5)
    w = torch.randn(256, 128, dtype=torch.bfloat16) * 0.02
    out = dict(quantized_stream(iter([("a.weight", w)]), pow2))
    scale = out["a.weight_scale_inv"]
    assert torch.equal(torch.exp2(torch.log2(scale).round()), scale)
    assert torch.equal(expected_weight(pow2, "a.weight", w), dequantize_blockwise(out["a.weight"], scale))
    assert not torch.equal(expected_weight(pow2, "a.weight", w), expected_weight(plan, "a.weight", w))
