"""benchmarks/rollout_sglang.py's measurement on a stand-in for sglang.Engine (SGLang has no CPU
build): every path runs, tokens are counted from what each returned, and the garbage-collector
columns and the GC-paused probe come out. The real engine runs in the H200 stage `sgl-rollout`."""

from __future__ import annotations

import os
import sys
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import common  # noqa: E402
import rollout_sglang  # noqa: E402
from verl.rollout.sglang_rollout import SGLangRollout  # noqa: E402


class FakeEngine:
    """sglang.Engine.generate's result shape: one dict per request (n per prompt when the sampling
    parameters ask for n), `max_new_tokens` ids each, log-prob triples when asked."""

    def __init__(self):
        self.flushes = 0

    def generate(self, input_ids, sampling_params, return_logprob=False):
        n = sampling_params.get("n", 1)
        length = sampling_params["max_new_tokens"]
        out = []
        for prompt in input_ids:
            for j in range(n):
                ids = [(sum(prompt) + j + k) % 90 + 5 for k in range(length)]
                meta = {"completion_tokens": length, "finish_reason": {"type": "length"}}
                if return_logprob:
                    meta["output_token_logprobs"] = [(-0.5, t, None) for t in ids]
                out.append({"output_ids": ids, "meta_info": meta})
        return out

    def flush_cache(self):
        self.flushes += 1


def test_measure_batch_runs_every_path_on_a_stand_in_engine(monkeypatch, tmp_path):
    from verl.config import RolloutConfig
    from verl.models.tiny import build_tiny_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_tiny_model("llama", str(tmp_path / "m"), hidden=32, pretrain_steps=0))
    tok.padding_side = "left"
    engine = SGLangRollout.__new__(SGLangRollout)  # no engine start: its generate runs on the stand-in
    engine.engine, engine.tokenizer, engine.cfg, engine.asleep = FakeEngine(), tok, RolloutConfig(), False
    engine.extra_sampling_kwargs = {"ignore_eos": True}
    monkeypatch.setattr(common, "resolve_device", lambda name: torch.device("cpu"))
    args = types.SimpleNamespace(n=2, max_new_tokens=8, repeats=2)
    rows = rollout_sglang.measure_batch(engine, tok, 8, args)
    assert [r["key"] for r in rows] == ["raw_plain", "raw_same", "ours", "ours_gc_off"]
    assert all(r["ok"] and r["tokens"] == 8 * 8 for r in rows), rows  # 4 prompts x 2 samples x 8 tokens
    assert all("gc_s" in r and "gc_full" in r for r in rows)
    split = ("around_engine_s", "readout_parse_s", "readout_batch_s", "readout_decode_s")
    assert all(all(k in r for k in split) for r in rows if r["key"].startswith("ours"))
    ours = next(r for r in rows if r["key"] == "ours")
    assert ours["readout_parse_s"] + ours["readout_batch_s"] + ours["readout_decode_s"] <= ours["around_engine_s"] + 1e-3
    assert engine.engine.flushes == 2 * 4  # the cache flushed before every timed call
