"""Mixture-of-experts models on vLLM on a CUDA GPU (pytest -m gpu tests/gpu/test_gpu_moe.py): the tiny Qwen3-MoE's
engine log-probs against the actor's before and after a weight sync (the experts go in the checkpoint
layout, one tensor per expert: verl/rollout/hf_weights.py), and GRPO steps with vLLM, the router's auxiliary
loss and the expert-load metrics, and with vLLM's routing replayed and LoRA on the experts. The trainer runs in a child process (vLLM keeps one engine per process).
On the CPU, vLLM's layerwise reload rebuilds an MoE layer wrongly even from the checkpoint's own tensors, so
the sync is checked here only; tests/models/test_moe.py checks what is sent against save_pretrained's file."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu
LP_MEAN_TOL = 0.05  # bf16 engine kernels vs the HF forward: mean |diff| per token (tests/gpu/test_gpu_vllm.py)


def _mean_diff(a, b, mask) -> float:
    m = mask.bool()
    return float((a[m] - b[m]).abs().mean())


def test_moe_engine_log_probs_match_the_actor_before_and_after_a_sync():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.batch import Batch
    from verl.config import RolloutConfig
    from verl.models.tiny import tiny_model_path
    from verl.rollout.base import SamplingParams
    from verl.rollout.vllm_rollout import VLLMRollout

    path = tiny_model_path("qwen3_moe")
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    engine = VLLMRollout(path, tok, RolloutConfig(gpu_memory_utilization=0.2, max_model_len=256, max_num_seqs=16,
                                                  enforce_eager=True, seed=1), dtype="bfloat16", device="cuda")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    enc = tok(["What is 2+3?", "Tell me a story.", "Hello, how are you today?"], return_tensors="pt", padding=True)
    prompts = Batch(input_ids=enc.input_ids, attention_mask=enc.attention_mask, prompt_text=["a", "b", "c"],
                    group_id=[0, 1, 2])
    sampling = SamplingParams(n=2, max_new_tokens=16)

    def actor(m, out):
        with torch.no_grad():
            logits = m(input_ids=out.input_ids.cuda(), attention_mask=out.attention_mask.cuda(),
                       position_ids=out.position_ids.cuda()).logits.float()
        p = out.prompt_length
        lp = torch.log_softmax(logits[:, p - 1:-1], -1).gather(-1, out.responses.cuda().unsqueeze(-1)).squeeze(-1)
        return lp.cpu()

    out = engine.generate(prompts, sampling)
    assert _mean_diff(out.rollout_log_probs, actor(model, out), out.response_mask) < LP_MEAN_TOL
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in other.named_parameters():
            if "experts" in name:  # the experts alone: a sync that misplaced them shows
                p.add_((torch.randn(p.shape, generator=gen) * 0.5).to(p.device, p.dtype))
    stale = engine.generate(prompts, sampling)
    stale_diff = _mean_diff(stale.rollout_log_probs, actor(other, stale), stale.response_mask)
    engine.sync_weights(other)
    fresh = engine.generate(prompts, sampling)
    fresh_diff = _mean_diff(fresh.rollout_log_probs, actor(other, fresh), fresh.response_mask)
    assert fresh_diff < LP_MEAN_TOL and stale_diff > 4 * fresh_diff, (fresh_diff, stale_diff)


def test_grpo_on_an_moe_model_with_vllm(tmp_path):
    run = subprocess.run([sys.executable, "-m", "verl.cli", "train", "algorithm.name=grpo", "model.name=tiny:qwen3_moe",
                          "rollout.name=vllm", "rollout.gpu_memory_utilization=0.2", "rollout.enforce_eager=true",
                          "training.total_steps=3", "training.batch_size=8", "rollout.max_new_tokens=16",
                          "training.router_aux_loss_coef=0.01", "logging.backends=[jsonl]",
                          "logging.progress_bar=false", "--save_dir", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in open(os.path.join(tmp_path, "out", "metrics.jsonl"))]
    steps = [r for r in rows if "moe/aux_loss" in r]
    assert len(steps) == 3 and all(r["moe/load_max_over_mean"] >= 1.0 for r in steps)
    assert all(r["rollout/logprob_diff"] < LP_MEAN_TOL for r in steps if "rollout/logprob_diff" in r)


def test_grpo_with_vllms_routing_replayed_and_lora_on_the_experts(tmp_path):
    """rollout.routing_replay: engine on vLLM (its routed experts, verl.rollout.engine_routing.py) with LoRA on
    attention, experts and routers (merged into the engine at every sync: docs/moe.md#lora)."""
    run = subprocess.run([sys.executable, "-m", "verl.cli", "train", "algorithm.name=grpo", "model.name=tiny:qwen3_moe",
                          "rollout.name=vllm", "rollout.gpu_memory_utilization=0.2", "rollout.enforce_eager=true",
                          "rollout.routing_replay=engine", "model.lora.rank=8", "model.lora.alpha=16",
                          "training.total_steps=3", "training.batch_size=8", "rollout.max_new_tokens=16",
                          "logging.backends=[jsonl]", "logging.progress_bar=false", "--save_dir", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in open(os.path.join(tmp_path, "out", "metrics.jsonl"))]
    steps = [r for r in rows if "moe/load_max_over_mean" in r]
    assert len(steps) == 3
    assert all(r["rollout/logprob_diff"] < LP_MEAN_TOL for r in steps if "rollout/logprob_diff" in r)
