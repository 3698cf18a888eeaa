"""benchmarks/async_grpo.py's drawn response lengths (--lengths tail:M): the same for a prompt in every
system and process, median M, the longest 8 M for 1 prompt in 16; and imposed on the trainer's vLLM
engine, every sample generates exactly its prompt's length."""

from __future__ import annotations

import os
import random
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import async_grpo  # noqa: E402
from conftest import small_overrides  # noqa: E402


def test_drawn_lengths_have_the_stated_shape():
    rng = random.Random(0)
    prompts = [[rng.randrange(50_000) for _ in range(rng.randint(5, 40))] for _ in range(4000)]
    lengths = [async_grpo.drawn_length(p, 128) for p in prompts]
    assert lengths == [async_grpo.drawn_length(list(p), 128) for p in prompts]  # a function of the ids alone
    assert all(64 <= n <= 192 or n == 1024 for n in lengths)
    assert 0.045 < lengths.count(1024) / len(lengths) < 0.08  # 1/16 = 0.0625; 4000 draws: sd 0.004
    assert 120 <= statistics.median(lengths) <= 136  # uniform 64-192 below the long ones: median ~128


def test_imposed_lengths_are_what_the_engine_generates(tmp_path, tiny_qwen2):
    from verl import create_trainer, load_config

    args = async_grpo.parse(["--lengths", "tail:6", "--engine", "vllm", "--model", tiny_qwen2, "--prompts", "2",
                             "--group", "2", "--steps", "1", "--warmup", "0", "--device", "cpu"])
    over = dict(o.split("=", 1) for o in async_grpo._overrides(args, "sync", str(tmp_path / "out")))
    assert over["rollout.max_new_tokens"] == "48" and over["rollout.stop"] == "[]"
    over.update({"rollout.kv_cache_gb": "0.25", "training.micro_batch_size": "4"})
    trainer = create_trainer(load_config(None, small_overrides(tmp_path / "run", **over)))
    try:
        async_grpo.impose_lengths(trainer, 6)
        trainer.step()
        b = trainer.run.last_batch
        got = b.response_mask.sum(dim=1).tolist()
        prompt_ids = [row[mask.bool()].tolist() for row, mask in zip(b.input_ids[:, :b.prompt_length],
                                                                      b.attention_mask[:, :b.prompt_length])]
        assert got == [float(async_grpo.drawn_length(p, 6)) for p in prompt_ids]
    finally:
        trainer.run.close()


def test_profile_and_console_land_beside_the_results(tmp_path):
    """--profile K wraps timed step K alone (warm-up steps come first) and writes the op table beside
    --out; each system's console is kept there with verl's own lines first."""
    import torch

    args = async_grpo.parse(["--profile", "1", "--warmup", "2", "--out", str(tmp_path / "r.json")])
    for k in range(5):
        with async_grpo.profiled(args, "sync", k):
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    text = (tmp_path / "r_sync_profile.txt").read_text()
    assert text.startswith("# step 3 of sync") and "aten::mm" in text  # warm-up 2 + K 1
    async_grpo._keep_log(args, "sync", "INFO engine\nverl: actor micro-batches of up to 9 tokens\n", b"last\n")
    log = (tmp_path / "r_sync.log").read_text().splitlines()
    assert log[:2] == ["# lines starting with 'verl'", "verl: actor micro-batches of up to 9 tokens"]
    assert log[-1] == "last"


def test_verl_set_overrides_come_last_and_win():
    args = async_grpo.parse(["--engine", "vllm", "--prompts", "4", "--verl-set", "training.micro_batch_size=2",
                             "training.max_tokens_per_micro_batch=16384"])
    over = async_grpo._overrides(args, "async-k1-stream", "/tmp/out")
    assert over[-2:] == ["training.micro_batch_size=2", "training.max_tokens_per_micro_batch=16384"]
    assert "training.micro_batch_size=32" in over  # the benchmark's own (4 x 8), overridden by the later one


def test_engine_step_ms_from_counted_steps_or_the_longest_response():
    # streaming: counted steps, (0.5 + 0.3) s over (100 + 60) steps = 5.0 ms
    stream = [{"stream_steps": 100, "stream_step_s": 0.5, "engine_call": 0.9, "longest": 80},
              {"stream_steps": 60, "stream_step_s": 0.3, "engine_call": 0.4, "longest": 50}]
    assert async_grpo._step_ms(stream) == 5.0
    # a batch per engine call: one step per token of the longest response, (2.0 + 1.0) s over (1000 + 200) = 2.5 ms
    calls = [{"stream_steps": None, "stream_step_s": None, "engine_call": 2.0, "longest": 1000},
             {"stream_steps": None, "stream_step_s": None, "engine_call": 1.0, "longest": 200}]
    assert async_grpo._step_ms(calls) == 2.5
    assert async_grpo._step_ms([{"stream_steps": None, "engine_call": None, "longest": 5}]) is None
