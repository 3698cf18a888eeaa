"""The update's FLOP count for perf/mfu (verl/tracking/flops.py), by hand on small shapes."""

from __future__ import annotations

import pytest
import torch

from verl.tracking.flops import ModelShape, model_shape, update_flops
from verl.tracking.system import compute_mfu


def test_full_fine_tuning_is_six_n_per_token_plus_attention():
    # N = N_train = 100, 2 layers of width 4, sequences of 3 and 5 tokens (8 tokens):
    #   linear    (4 x 100 + 2 x 100) x 8       = 4,800   (6 N per token)
    #   attention 6 x 2 layers x 4 x (9 + 25)   = 1,632
    assert update_flops(ModelShape(100, 100, 2, 4), [3, 5]) == 6432.0


def test_lora_counts_the_frozen_base_activation_gradients_but_not_its_weight_gradients():
    # N = 100 of which 10 trainable (the adapters): (4 x 100 + 2 x 10) x 8 = 3,360 (+ the same attention)
    assert update_flops(ModelShape(100, 10, 2, 4), [3, 5]) == 3360.0 + 1632.0
    # against full fine-tuning's 6 N: 420 / 600 of the linear FLOPs
    assert update_flops(ModelShape(100, 10, 0, 0), [8]) / update_flops(ModelShape(100, 100, 0, 0), [8]) == 0.7


def _llama(tie: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=tie)
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("tie", [False, True])
def test_model_shape_leaves_out_the_embedding_lookup_unless_it_is_the_tied_head(tie):
    model = _llama(tie)
    total = sum(p.numel() for p in model.parameters())  # a tied matrix is one parameter
    shape = model_shape(model)
    embedding = 64 * 16
    assert shape.matmul_params == (total if tie else total - embedding)
    assert shape.trainable_matmul_params == shape.matmul_params
    assert (shape.layers, shape.attention_width) == (2, 16)  # 2 heads x head_dim 8


def test_model_shape_of_a_lora_model_trains_only_the_adapters():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_llama(False), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    shape = model_shape(model)
    # per layer: q_proj (16 -> 16) and v_proj (16 -> 8): A is r x in, B is out x r
    per_layer = (2 * 16 + 16 * 2) + (2 * 16 + 8 * 2)
    assert shape.trainable_matmul_params == 2 * per_layer
    assert shape.matmul_params == sum(p.numel() for p in model.parameters()) - 64 * 16


def test_compute_mfu():
    # 6e14 FLOPs in 1 s on a 989 TFLOP/s GPU
    assert compute_mfu(6e14, 1.0, 989e12) == pytest.approx(6e14 / 989e12)
    assert compute_mfu(600.0, 2.0, 600.0) == pytest.approx(0.5)
    assert compute_mfu(10.0, 1.0, None) is None
    assert compute_mfu(10.0, 0.0, 1e12) is None
