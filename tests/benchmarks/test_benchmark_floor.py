"""benchmarks/floor.py: each stage's floor from hand-counted bytes and FLOPs of tiny configs."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import floor  # noqa: E402

# hidden 4, 2 query heads of width 2, 1 KV head, MLP 8, 1 layer, vocab 10:
#   trunk = q 4*2*2 + k,v 2*4*1*2 + o 2*2*4 + mlp 3*4*8 = 16 + 16 + 16 + 96 = 144; head = 4*10 = 40; attn width 4
CFG = SimpleNamespace(hidden_size=4, num_attention_heads=2, num_key_value_heads=1, head_dim=2, intermediate_size=8,
                      num_hidden_layers=1, vocab_size=10, tie_word_embeddings=True)


def test_model_sizes_by_hand():
    assert floor.flop_terms(CFG) == dict(trunk=144, head=40, attn_width=4, weights=144)
    assert floor.decode_weight_bytes(CFG) == 2 * (144 + 40)  # 368
    assert floor.kv_bytes_per_token(CFG) == 2 * 1 * 1 * 2 * 2  # K and V, 1 layer, 1 KV head of 2, bf16: 8
    # q (4 + 4) + k (4 + 2) + v (4 + 2) + o (4 + 4) + gate, up (4 + 8) each + down (8 + 4) = 8+6+6+8+36 = 64
    assert floor.lora_width(CFG) == 64
    assert floor.sync_bytes(CFG, lora=False) == 368  # tied: the head once
    assert floor.sync_bytes(SimpleNamespace(**{**vars(CFG), "tie_word_embeddings": False}), lora=False) == 448
    assert floor.sync_bytes(CFG, lora=True) == 288  # the decoder layer's matmuls only


def test_moe_sizes_by_hand():
    # CFG's attention (48) with 4 experts of width 8, top-2, no shared expert: a token's MLP is 2 x 3*4*8 = 192
    # and the router 4*4 = 16: trunk 48 + 192 + 16 = 256; every expert, 4 x 96: weights 48 + 384 + 16 = 448
    moe = SimpleNamespace(**vars(CFG), num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8)
    assert floor.flop_terms(moe) == dict(trunk=256, head=40, attn_width=4, weights=448)
    assert floor.decode_weight_bytes(moe) == 2 * (448 + 40)  # a large batch reads every expert
    assert floor.sync_bytes(moe, lora=True) == 2 * 448
    # LoRA per token: attention 28 (q 8 + k 6 + v 6 + o 8) + 2 experts x (gate, up: 4 + 8 each, down: 8 + 4) = 72,
    # + the router (4 + 4): 108
    assert floor.lora_width(moe) == 108
    # Qwen2-MoE's shared expert (width 8) and its gate (4 -> 1) on top: trunk + 96 + 4; LoRA + (12 + 24) + 5
    shared = SimpleNamespace(**vars(moe), shared_expert_intermediate_size=8)
    assert floor.flop_terms(shared)["trunk"] == 256 + 100 and floor.lora_width(shared) == 108 + 41


def test_decode_bytes_two_sequences():
    # W = 100, K = 10; prompts 2 and 3 tokens, responses 2 and 1:
    #   step 0: both run, KV 2 + 3 = 5 tokens; step 1: only the first, KV 2 + 1 = 3 tokens
    #   all at once: 2 steps * 100 + 10 * 8 = 280
    assert floor.engine_steps([2, 1]) == 2
    assert floor.decode_bytes(100, 10, [2, 3], [2, 1]) == 280
    # one slot: the second starts after the first: 3 steps, the same KV reads: 300 + 80
    assert floor.engine_steps([2, 1], max_concurrent=1) == 3
    assert floor.decode_bytes(100, 10, [2, 3], [2, 1], max_concurrent=1) == 380
    # FIFO on 2 slots, both free at step 0: [1, 5, 1, 1]: A 0-1, B 0-5, A 1-2, A 2-3: makespan 5;
    # the long one last, [1, 1, 1, 5]: A 0-1, B 0-1, A 1-2, B 1-6: makespan 6 (a late long tail costs steps)
    assert floor.engine_steps([1, 5, 1, 1], max_concurrent=2) == 5
    assert floor.engine_steps([1, 1, 1, 5], max_concurrent=2) == 6
    with pytest.raises(ValueError):
        floor.decode_bytes(100, 10, [1, 2], [1])


def test_update_flops_full_and_lora_by_hand():
    # 2 sequences of 1 prompt + 2 response tokens (s = 3): tokens 6, response tokens 4
    #   F_mm = 2*144*6 + 2*40*4 = 1728 + 320 = 2048; F_attn = 2 * (2*4*3*4) = 192
    assert floor.update_flops(CFG, [1, 1], [2, 2]) == 3 * 2048 + 3 * 192  # 6720
    # LoRA rank 2: 2 F_mm + 3 F_attn + 6 * 2 * 64 * 6 = 4096 + 576 + 4608 = 9280 (the adapters outweigh a tiny base)
    assert floor.update_flops(CFG, [1, 1], [2, 2], lora_rank=2) == 9280
    # uneven lengths: attention counts each sequence's own s (s + 1), not the mean's: s = 2 and 4:
    #   F_mm = 2*144*6 + 2*40*4 = 2048; F_attn = 2*4*(2*3 + 4*5) = 208
    assert floor.update_flops(CFG, [1, 1], [1, 3]) == 3 * 2048 + 3 * 208


def test_floors_and_fractions_on_a_card():
    h100 = floor.card("NVIDIA H100 80GB HBM3")
    assert (h100.hbm_bytes_s, h100.bf16_flops) == (3.35e12, 989e12)
    assert floor.card("NVIDIA H100 PCIe").hbm_bytes_s == 2.0e12 and floor.card("NVIDIA H200").hbm_bytes_s == 4.8e12
    assert floor.card(None) is None and floor.card("NVIDIA A10G") is None
    work = dict(decode_bytes=6.7e12, update_flops=989e12 / 2, sync_bytes=3.35e12)
    f = floor.floors(work, h100)
    # 6.7e12 B / 3.35e12 B/s = 2 s; half a second of peak; the copy reads and writes: 2 * 3.35e12 / 3.35e12 = 2 s
    assert f == pytest.approx(dict(generation=2.0, update=0.5, sync=2.0))
    assert floor.fraction(0.5, 2.0) == 0.25 and floor.fraction(None, 2.0) is None and floor.fraction(1.0, 0) is None


def test_step_work_of_a_real_architecture():
    # qwen2-1.5b: W = 2 * (28 * 1536 * (1536 + 2*256 + 1536 + 3*8960) + 1536 * 151936) = 3.09 GB;
    # 256 sequences of 512 tokens after 32-token prompts: 512 steps * W, plus
    # K = 2 * 28 * 2 * 128 * 2 = 28672 B/token over 256 * (512*32 + 512*511/2) = 37.7M token reads
    cfg = SimpleNamespace(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                          num_hidden_layers=28, vocab_size=151936, tie_word_embeddings=True)
    w = floor.step_work(cfg, [32] * 256, [512] * 256)
    weights = 2 * (28 * 1536 * (1536 + 512 + 1536 + 3 * 8960) + 1536 * 151936)
    assert w["decode_bytes"] == pytest.approx(512 * weights + 28672 * 256 * (512 * 32 + 512 * 511 / 2))
    h100 = floor.card("NVIDIA H100 80GB HBM3")
    assert 0.5 < floor.floors(w, h100)["generation"] < 0.9  # 0.79 s: 1.58 TB of weights + 1.08 TB of KV
