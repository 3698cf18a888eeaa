"""benchmarks/actor_update.py with --lora-rank: the adapters train on a frozen base, rebuilt for each variant,
and the FLOPs count the frozen base's forward and input gradients only."""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import actor_update  # noqa: E402


def _rows(tmp_path, *extra):
    args = actor_update.parse(["--device", "cpu", "--tiny", "--repeats", "1", "--variants", "padded", "packed",
                               "--out", str(tmp_path), *extra])
    return actor_update.run(args)


def test_lora_variants_train_the_adapters_alone_and_count_two_thirds_of_the_matmul_flops(tmp_path):
    full = _rows(tmp_path / "full")
    lora = _rows(tmp_path / "lora", "--lora-rank", "4")
    for r in full + lora:
        assert "error" not in r, r
        assert r["grad_norm"] > 0 and math.isfinite(r["pg_loss"])
    # every variant after the first got a fresh base: each trains only its own adapters (rank 4 on the tiny
    # model's linear layers: a few percent of its parameters), never a second layer of adapters
    assert 0 < lora[0]["trainable_m"] == lora[1]["trainable_m"] < 0.1 * full[0]["trainable_m"]
    # full fine-tuning: 3F + 3A; LoRA: 2F + 3A + 6 adapters T (verl.tracking.flops). With attention A >= 0 and
    # the adapters a few percent of the trunk, LoRA's count lies between 2/3 and all of the full count.
    ratio = lora[0]["flops"] / full[0]["flops"]
    assert 2 / 3 - 0.01 < ratio < 1.0, ratio
