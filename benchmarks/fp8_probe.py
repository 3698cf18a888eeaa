"""Probe (GPU): how a vLLM FP8 engine holds one block-FP8 weight after a sync, beside ours.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/fp8_probe.py

tests/test_gpu_fp8.py found on an H100 (vLLM 0.26) that the engine's dequantized FP8 weights after a
sync are not bit for bit our round trip (verl/rollout/fp8.py). This prints, for the first decoder layer's
down_proj, the engine's FP8 method and kernel classes, the weight's and scale's shapes, dtypes and
strides, whether its FP8 bytes and scales equal ours (as they are, or transposed), the scale ratios, and
the engine-vs-actor log-prob gap: enough to tell a layout change (transposed scales) from a
requantization (power-of-two scales) from a wrong load.
"""

from __future__ import annotations

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
    out["_classes"] = f"{type(method).__name__} / {type(getattr(method, 'fp8_linear', None)).__name__}"
    return out


def main() -> None:
    sys.path.insert(0, TESTS)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import test_gpu_fp8 as gpu_tests
    from verl.config import RolloutConfig
    from verl.models.tiny import build_tiny_model
    from verl.rollout.fp8 import quantize_blockwise
    from verl.rollout.vllm_rollout import VLLMRollout

    path = build_tiny_model("llama", "/tmp/fp8_probe_llama", hidden=256, pretrain_steps=20)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    actor = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("cuda").eval()
    cfg = RolloutConfig(quantization="fp8", max_model_len=256, max_num_seqs=32, seed=1, gpu_memory_utilization=0.15,
                        enable_sleep_mode=True, enforce_eager=True)
    engine = VLLMRollout(path, tok, cfg, dtype="bfloat16", device="cuda")
    engine.sync_weights(actor)
    held = engine.llm.collective_rpc(engine_view)[0]
    print("classes", held.pop("_classes"))
    q, scale = quantize_blockwise(dict(actor.state_dict())[f"{LAYER}.weight"].float())
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
        print("engine / our scales", (es / ours_s).flatten()[:6].tolist())
    print("engine vs actor logprob_diff", gpu_tests.diff_to(actor, gpu_tests.sample(engine, tok)))


if __name__ == "__main__":
    main()
