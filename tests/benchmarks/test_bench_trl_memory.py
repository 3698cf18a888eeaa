"""benchmarks/trl_memory.py: TRL's micro-batch sized to the card, by hand."""

from __future__ import annotations

import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import trl_memory  # noqa: E402

GIB = 2 ** 30


def test_states_by_hand():
    assert trl_memory.states_bytes(10, 0, "float32") == 180  # 18 N: fp32 weights, grads, 2 moments + bf16 copies
    assert trl_memory.states_bytes(10, 2, "bfloat16") == 20 + 32  # bf16 base 2 N + 16 bytes a LoRA parameter
    assert trl_memory.states_bytes(10, 2, "float32") == 60 + 32  # fp32 base + its autocast copies: 6 N


def test_activations_are_verls_estimate():
    # H 64, L 2, I 256: a layer 2 (8*64 + 4*256) + 16*64 = 4096 bytes; (L + 1) layers = 12288
    assert trl_memory.activation_bytes_per_token(64, 2, 256) == 12288


def test_micro_batch_by_hand():
    # card 20 GiB: 0.7 * 20 = 14 GiB, less the 3 GiB reserve and 1 GiB of states: 10 GiB left, 8 GiB usable
    # a sequence: 1000 tokens * 1 MB + 500 completion tokens * 6 * 1000 (logits) = 1.003e9 bytes
    #   8 of them 8.024e9 <= 8 GiB = 8.59e9; 16: 16.05e9 > 8.59e9  ->  8
    s = trl_memory.micro_batch(20 * GIB, 64, 1000, 500, 10 ** 6, 1000, GIB)
    assert (s.micro_batch, s.left_bytes, s.per_seq_bytes) == (8, 10 * GIB, 1_003_000_000)
    assert trl_memory.micro_batch(20 * GIB, 12, 1000, 500, 10 ** 6, 1000, GIB).micro_batch == 4  # 8 does not divide 12
    assert trl_memory.micro_batch(20 * GIB, 7, 1000, 500, 10 ** 6, 1000, GIB).micro_batch == 1  # odd n
    assert trl_memory.micro_batch(5 * GIB, 64, 1000, 500, 10 ** 6, 1000, GIB).micro_batch == 1  # nothing left: 1
    # a 40 GiB card: 28 - 4 = 24 GiB left, 0.8 of it 20.6e9: 16 sequences (16.05e9) fit, 32 (32.1e9) do not
    assert trl_memory.micro_batch(40 * GIB, 64, 1000, 500, 10 ** 6, 1000, GIB).micro_batch == 16
