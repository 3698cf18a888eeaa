"""Probe (GPU): how a vLLM FP8 engine holds one block-FP8 weight after a sync, beside ours.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/fp8_probe.py

tests/gpu/test_gpu_fp8.py found on an H100 (vLLM 0.26) that the engine's dequantized FP8 weights after a
sync with amax / 448 scales are not bit for bit our round trip (verl/rollout/fp8.py). This prints, for
the first decoder layer's down_proj, the engine's FP8 method and kernel classes (and the DeepGEMM
kernel's UE8M0 flags), then for a sync with each scale format (amax / 448 as sent before, and the
power-of-two scales verl now sends where the kernel requantizes): the weight's and scale's shapes,
dtypes and strides, whether its FP8 bytes and scales equal ours (as they are, or transposed), the
scale ratios, how many dequantized elements differ from our round trip, whether vLLM's own UE8M0
requantization (fp8_utils.requant_weight_ue8m0_inplace) of what we sent gives what the engine holds,
and the engine-vs-actor log-prob gap: enough to tell a layout change (transposed scales) from a
requantization (power-of-two scales) from a wrong load.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
LAYER = "model.layers.0.mlp.down_proj"


def engine_view(worker) -> dict:
    """On the engine's worker: the layer's parameters (FP8 bytes as uint8) and its method/kernel classes."""
    model = worker.model_runner.get_model()
    out = {n: (tuple(t.shape), str(t.dtype), tuple(t.stride()),
               t.detach().view(torch.uint8).cpu() if t.dtype == torch.float8_e4m3fn else t.detach().float().cpu())
           for n, t in model.named_parameters() if n.startswith(LAYER)}
    method = model.model.layers[0].mlp.down_proj.quant_method
    kernel = getattr(method, "fp8_linear", None)
    fallback = getattr(kernel, "fallback", None)
    out["_classes"] = (f"{type(method).__name__} / {type(kernel).__name__} (fallback {type(fallback).__name__}); "
                       + "; ".join(f"{type(k).__name__}: use_deep_gemm_e8m0={getattr(k, 'use_deep_gemm_e8m0', None)} "
                                   f"is_deep_gemm_supported={getattr(k, 'is_deep_gemm_supported', None)}"
                                   for k in (kernel, fallback) if k is not None))
    return out


def compare(engine, actor, tok, pow2: bool) -> None:
    import test_gpu_fp8 as gpu_tests
    from verl.rollout.fp8 import dequantize_blockwise, quantize_blockwise

    engine.fp8 = dataclasses.replace(engine.fp8, pow2_scales=pow2)
    engine.sync_weights(actor)
    print(f"\n== sync with {'power-of-two (UE8M0)' if pow2 else 'amax / 448'} scales")
    held = engine.llm.collective_rpc(engine_view)[0]
    held.pop("_classes")
    w = dict(actor.state_dict())[f"{LAYER}.weight"].float()
    q, scale = quantize_blockwise(w, pow2_scales=pow2)
    ours_q, ours_s = q.view(torch.uint8).cpu(), scale.float().cpu()
    print("ours", tuple(q.shape), tuple(scale.shape), ours_s.flatten()[:3].tolist())
    for name, (shape, dtype, stride, t) in held.items():
        print(name, shape, dtype, stride, t.flatten()[:3].tolist())
    eq, es = held[f"{LAYER}.weight"][3], held[f"{LAYER}.weight_scale_inv"][3]
    print("fp8 bytes equal", eq.shape == ours_q.shape and torch.equal(eq, ours_q),
          "transposed", eq.shape == ours_q.T.shape and torch.equal(eq, ours_q.T.contiguous()))
    if eq.shape == ours_q.shape:
        print("share of fp8 bytes that differ", float((eq != ours_q).float().mean()))
    print("scales equal", es.shape == ours_s.shape and torch.equal(es, ours_s))
    if es.shape == ours_s.shape:
        ratio = es / ours_s
        print("engine / our scales", ratio.flatten()[:6].tolist(), "min", float(ratio.min()), "max", float(ratio.max()))
        print("engine scales all powers of two", bool(torch.equal(torch.exp2(torch.log2(es).round()), es)))
        held_w = dequantize_blockwise(eq.view(torch.float8_e4m3fn), es)
        ours_w = dequantize_blockwise(q.cpu(), ours_s)
        rel = ((held_w - ours_w).abs() / ours_w.abs().clamp_min(1e-12))[ours_w != 0]
        print("dequantized: share of elements that differ", float((held_w != ours_w).float().mean()),
              "max relative difference", float(rel.max()), "mean", float(rel.mean()))
        from vllm.model_executor.layers.quantization.utils.fp8_utils import requant_weight_ue8m0_inplace

        vq, vs = q.clone(), scale.clone()
        with torch.compiler.set_stance("force_eager"):  # (uncompiled: the same float32 arithmetic, no compile wait)
            requant_weight_ue8m0_inplace(vq, vs)  # vLLM's own UE8M0 requantization of what we sent
        print("vLLM's UE8M0 requantization of what we sent == engine: bytes",
              torch.equal(vq.view(torch.uint8).cpu(), eq), "scales", torch.equal(vs.float().cpu(), es),
              "| it leaves what we sent as it was:", torch.equal(dequantize_blockwise(vq, vs).cpu(), ours_w))
    print("engine vs actor logprob_diff", gpu_tests.diff_to(actor, gpu_tests.sample(engine, tok)))


def main() -> None:
    sys.path.insert(0, TESTS)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.config import RolloutConfig
    from verl.models.tiny import build_tiny_model
    from verl.rollout.vllm_rollout import VLLMRollout

    path = build_tiny_model("llama", "/tmp/fp8_probe_llama", hidden=256, pretrain_steps=20)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    actor = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("cuda").eval()
    cfg = RolloutConfig(quantization="fp8", max_model_len=256, max_num_seqs=32, seed=1, gpu_memory_utilization=0.15,
                        enable_sleep_mode=True, enforce_eager=True)
    engine = VLLMRollout(path, tok, cfg, dtype="bfloat16", device="cuda")
    print("env VLLM_USE_DEEP_GEMM", os.environ.get("VLLM_USE_DEEP_GEMM"), "VLLM_USE_DEEP_GEMM_E8M0",
          os.environ.get("VLLM_USE_DEEP_GEMM_E8M0"), "| plan.pow2_scales (read off the engine)", engine.fp8.pow2_scales)
    from verl.rollout.fp8_vllm import ue8m0_requantizing_layers

    print("(FP8 layers, requantizing to UE8M0) per worker", engine.llm.collective_rpc(ue8m0_requantizing_layers))
    engine.sync_weights(actor)
    print("classes", engine.llm.collective_rpc(engine_view)[0]["_classes"])
    compare(engine, actor, tok, pow2=False)
    compare(engine, actor, tok, pow2=True)


if __name__ == "__main__":
    main()
