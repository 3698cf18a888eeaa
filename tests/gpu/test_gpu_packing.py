"""Packed samples on CUDA (verl/workers/packing.py), the GPU default since packing became automatic:
the actor of a SmolLM2-135M-shaped model (random weights, built here, no download) packs by default,
with verl's attention function and the FlashAttention-2 varlen kernel inside PyTorch for its head
shape; and its log-probs on a batch of very different lengths (the long-tail work of
benchmarks/async_grpo.py --lengths tail:M) agree with the padded path's.

Why: the CPU suite tests the packed attention on the CPU paths only (per-sequence SDPA / eager). On
the H200 the long-tail GRPO update took 5.2 s for ~59k tokens (2026-12-02): that run computed in float32,
where packing falls back to per-sequence SDPA; in bf16 it took 0.43 s (a later run that day). Run on the H200:
`pytest -m gpu tests/gpu/test_gpu_packing.py` (also selected by `h200_run.sh cuda-tests`).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (run on the H200: pytest -m gpu)", allow_module_level=True)


def _config(packed):
    from verl.config import config_from_dict

    training = {"batch_size": 8, "mini_batch_size": 16, "micro_batch_size": 16, "lr": 1e-6}
    if packed is not None:
        training["use_packed_samples"] = packed
    return config_from_dict({
        "device": "cuda", "model": {"dtype": "bfloat16"},
        "algorithm": {"name": "grpo", "use_kl_loss": False},
        "rollout": {"n": 2, "max_new_tokens": 1024}, "training": training,
        "data": {"max_prompt_length": 64}, "logging": {"backends": [], "progress_bar": False},
    })


def test_the_actor_packs_by_default_on_cuda_and_matches_the_padded_path():
    import actor_update
    import common
    from verl.workers.actor import Actor
    from verl.workers.packing import varlen_kernel_works

    device = torch.device("cuda")
    model = common.build_model("smollm2-135m", device, torch.float32)
    c = model.config
    cfg = _config(None)
    assert cfg.training.use_packed_samples is True  # the automatic default on a GPU
    actor = Actor.from_config(cfg, device, model, adapt_to_memory=False)
    assert actor.micro.packed and actor.packing_mode == "attention", (actor.micro, actor.packing_mode)
    head_dim = c.hidden_size // c.num_attention_heads
    assert varlen_kernel_works(str(device), torch.bfloat16, c.num_attention_heads, c.num_key_value_heads, head_dim)

    # 16 sequences, prompts of 5-40 tokens, responses of 8-1000: one packed row against a padded block
    batch, _, resp_lens = actor_update.make_batch(16, (5, 40), (8, 1000), c.vocab_size, seed=3)
    packed_lp, _ = actor.compute_log_probs(batch)
    padded = Actor.from_config(_config(False), device, model, adapt_to_memory=False)
    assert not padded.micro.packed
    padded_lp, _ = padded.compute_log_probs(batch)
    mask = batch.response_mask.bool()
    diff = (packed_lp - padded_lp)[mask].abs()
    # Both under bf16 autocast with different attention kernels (varlen flash vs SDPA over a padded
    # block): rounding moves log-probs of ~-10.8 (uniform over 49k tokens) by ~1e-2. Sequences that
    # attended across each other would differ wherever the context differs, not by rounding alone.
    assert diff.mean() < 0.05 and diff.max() < 0.5, (float(diff.mean()), float(diff.max()))
    assert int(mask.sum()) == sum(resp_lens)
