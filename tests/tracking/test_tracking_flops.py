"""The update's FLOP count for perf/mfu and the benchmarks' update floor (verl/tracking/flops.py), by hand."""

from __future__ import annotations

import pytest
import torch

from verl.tracking.flops import UpdateShape, model_shape, update_flops, update_flops_of
from verl.tracking.system import compute_mfu


def test_full_fine_tuning_by_hand():
    # trunk 100, head 10, attention width 4; two sequences: prompt 1 + response 2 (s=3), prompt 2 + response 3 (s=5)
    #   forward matmuls F = 2 x 100 x 8 tokens + 2 x 10 x 5 responses = 1,700
    #   attention       A = 2 x 4 x (3 x 4 + 5 x 6)                  = 336
    #   full: 3 F + 3 A = 5,100 + 1,008 = 6,108
    assert update_flops(UpdateShape(100, 10, 0, 4), [1, 2], [2, 3]) == 6108.0


def test_lora_counts_the_frozen_base_activation_gradients_and_the_adapters():
    # the same with 7 adapter weights: 2 F + 3 A + 6 x 7 x 8 tokens = 3,400 + 1,008 + 336 = 4,744
    assert update_flops(UpdateShape(100, 10, 7, 4), [1, 2], [2, 3]) == 4744.0
    # no attention, no head, 8 tokens: 6 N a token for full fine-tuning (4,800), 4 N plus 6 per adapter weight
    # a token for LoRA (3,200 + 48)
    assert update_flops_of(100, 0, 0, 0, [0], [8]) == 4800.0
    assert update_flops_of(100, 0, 1, 0, [0], [8]) == 3200.0 + 48.0


def _llama(tie: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=tie)
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("tie", [False, True])
def test_model_shape_counts_the_head_once_and_not_the_embedding_lookup(tie):
    model = _llama(tie)
    total = sum(p.numel() for p in model.parameters())  # a tied matrix is one parameter
    shape = model_shape(model)
    head = 64 * 16
    assert shape.head_params == head
    assert shape.trunk_params == total - head - (0 if tie else head)  # untied: the embedding is a lookup
    assert shape.adapter_params == 0
    assert shape.attention_width == 2 * 2 * 8  # 2 layers x 2 heads x head_dim 8


def test_model_shape_of_a_lora_model_trains_only_the_adapters():
    from peft import LoraConfig, get_peft_model

    base = model_shape(_llama(False))
    shape = model_shape(get_peft_model(_llama(False), LoraConfig(r=2, target_modules=["q_proj", "v_proj"])))
    # per layer: q_proj (16 -> 16) and v_proj (16 -> 8): A is r x in, B is out x r
    per_layer = (2 * 16 + 16 * 2) + (2 * 16 + 8 * 2)
    assert shape.adapter_params == 2 * per_layer
    assert shape.trunk_params == base.trunk_params and shape.head_params == base.head_params


def test_the_benchmark_floor_counts_as_the_trainer():
    from transformers import LlamaConfig

    from benchmarks.floor import flop_terms, update_flops as floor_flops

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=False)
    t = flop_terms(cfg)
    shape = model_shape(_llama(False))
    # the floor's sizes from the config equal the model's (bias-free Llama: every trunk weight is a matmul,
    # less the norms' scales, which the model counts and the config's arithmetic leaves out)
    norms = 2 * 16 * 2 + 16
    assert (t["trunk"], t["head"], t["attn_width"]) == (shape.trunk_params - norms, shape.head_params,
                                                        shape.attention_width)
    assert floor_flops(cfg, [3], [5]) == update_flops_of(t["trunk"], t["head"], 0, t["attn_width"], [3], [5])


def test_an_moe_models_trunk_counts_the_experts_a_token_uses():
    """Qwen3-MoE, hidden 16, 1 layer, 2 heads of 8 (q/k norms), 1 KV head, 4 experts of width 8, top-2:
    attention q 16x16 + k, v 16x8 each + o 16x16 = 768; experts gate_up (4, 16, 16) + down (4, 8, 16) = 1,536,
    a token uses 2 of 4: 768; router 4x16 = 64. Trunk = 768 + 768 + 64 = 1,600 matmul weights, plus the norms'
    scales the model counts (2 x 16 layer norms + 2 x 8 q/k norms + 16 final = 64): 1,664; the floor's
    config arithmetic (benchmarks/floor.py) gives the same 1,600 without the norms."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from benchmarks.floor import flop_terms

    cfg = Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_experts=4,
                         num_experts_per_tok=2, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=8, decoder_sparse_step=1, tie_word_embeddings=False)
    shape = model_shape(Qwen3MoeForCausalLM(cfg))
    assert shape.trunk_params == 1600 + 64
    assert flop_terms(cfg)["trunk"] == 1600 and flop_terms(cfg)["weights"] == 768 + 1536 + 64


def test_compute_mfu():
    # 6e14 FLOPs in 1 s on a 989 TFLOP/s GPU
    assert compute_mfu(6e14, 1.0, 989e12) == pytest.approx(6e14 / 989e12)
    assert compute_mfu(600.0, 2.0, 600.0) == pytest.approx(0.5)
    assert compute_mfu(10.0, 1.0, None) is None
    assert compute_mfu(10.0, 0.0, 1e12) is None
