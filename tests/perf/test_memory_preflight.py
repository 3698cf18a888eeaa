"""The memory preflight (verl/trainer/memory_plan.py, verl/trainer/preflight.py, `verl plan`):
the estimate by hand, against the per-phase peaks measured on the H200, and its refusal line."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest

from verl.config import load_config
from verl.trainer import memory_plan as mp
from verl.trainer import preflight
from verl.trainer.plan_command import _gpu_platform

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import common  # noqa: E402  (benchmarks/common.py: the real architectures' configs)

GIB = mp.GIB
H200 = int(139.8 * GIB)


@pytest.fixture(scope="module")
def arch_dirs(tmp_path_factory):
    """A folder with only config.json per benchmark architecture: the preflight reads nothing else."""
    root = tmp_path_factory.mktemp("archs")

    def folder(arch: str) -> str:
        path = root / arch
        if not (path / "config.json").exists():
            common.hf_config(arch).save_pretrained(str(path))
        return str(path)

    return folder


# ------------------------------------------------------------------ (a) by hand


def test_qwen2_1_5b_full_fine_tuning_param_copy_by_hand(arch_dirs):
    """Qwen2-1.5B architecture (H 1536, I 8960, L 28, 12 heads, 2 KV heads of 128, V 151936, tied),
    full fine-tuning, bfloat16 with mixed_precision param_copy, torch_compile, kept logits, a set
    budget of 8192 tokens, 512 prompt + 512 response tokens."""
    facts = mp.model_facts(common.hf_config("qwen2-1.5b"))
    P = 1_543_714_304  # embeddings 151936 x 1536 (tied: once) + 28 layers + the final norm
    assert facts.params == P
    assert facts.kv_per_token == 2 * 28 * 2 * 128  # K and V, every layer: 14336 elements a token
    cfg = load_config(None, [f"model.name={arch_dirs('qwen2-1.5b')}", "model.dtype=bfloat16", "rollout.name=vllm",
                             "algorithm.name=grpo", "algorithm.use_kl_loss=false", "training.batch_size=8",
                             "rollout.n=4", "rollout.max_new_tokens=512", "data.max_prompt_length=512",
                             "training.max_tokens_per_micro_batch=8192"], platform=_gpu_platform())
    w = mp.Work.of(cfg)
    assert (w.mixed_precision, w.compiled, w.keep_logits, w.a) == ("param_copy", True, True, 2)  # auto on a GPU
    held = mp.held_bytes(facts, w)
    # 4 B float32 master + 2 B bfloat16 copy = 6 B a parameter of weights; AdamW 2 x 4 B = 8 B: 14 B a parameter
    assert (held.weights, held.optimizer, held.total) == (6 * P, 8 * P, 14 * P)  # 20.1 GiB
    # update: + float32 gradients 4 B and the copy's bfloat16 gradients 2 B: 20 B a parameter (28.75 GiB)
    fixed = mp.update_fixed(facts, w)
    assert (fixed.grads, fixed.total) == (6 * P, 20 * P)
    # a layer: a (6 H + 2 KV + 2 I) + 4 a H (compiled: gate and up kept; param_copy: bf16 residual)
    #        = 2 (9216 + 512 + 17920) + 12288 = 67584 bytes a token; (L + 1) layers: 1,959,936
    assert mp.per_token(facts, w) == 29 * 67584 == 1_959_936
    p = mp.plan(facts, w, H200, "h200")
    update = p.stage("update")
    assert p.micro_tokens == 8192
    assert update.activations == 8192 * 1_959_936  # 14.95 GiB
    # head 1024 x 151936 x (2 + 12) = 2,178,154,496; kept logits 2 x 151936 x 8192 x 512 / 1024 = 1,244,659,712
    assert update.logits == 2_178_154_496 + 1_244_659_712
    assert update.engine == 0  # vLLM sleeps: the budget is set, so sleep_when: needed sleeps
    assert update.total == 20 * P + 8192 * 1_959_936 + 2_178_154_496 + 1_244_659_712  # 47.1 GiB
    rollout = p.stage("rollout")
    assert rollout.engine == int(0.5 * H200) and rollout.total == 14 * P + int(0.5 * H200)  # 90.0 GiB
    # the sync: one bucket of 1 GiB (the largest weight, the embedding, is 0.43 GiB in bfloat16)
    assert p.stage("sync").total == rollout.total + mp.SYNC_BUCKET_BYTES
    assert p.fits


def test_lora_and_offload_by_hand():
    """LoRA keeps the base in model.dtype and trains rank x (in + out) per linear layer; the
    optimizer offload leaves the moments off the device between updates, back for the update."""
    facts = mp.model_facts(common.hf_config("qwen2.5-14b"))
    # per layer (H 5120, I 13824, 8 KV heads of 128): q and o 5120 + 5120, k and v 5120 + 1024,
    # gate and up 5120 + 13824, down 13824 + 5120: 89600; 48 layers
    assert facts.lora_width == 48 * 89600
    base = dict(dtype="bfloat16", lora_rank=16, mixed_precision="autocast", offload_optimizer=False,
                offload_idle_models=False, kl=False, critic=False, checkpointing=False, compiled=False,
                keep_logits=False, chunk_size=1024, engine="vllm", hf_copy=False, gpu_memory_utilization=0.5, sleep=True,
                sleep_when="needed", sequences=32, mini_batch=32, micro_batch=4, max_tokens=None,
                prompt_tokens=72, response_tokens=256)
    w = mp.Work(**base)
    T = 16 * 48 * 89600  # 68.8M
    held = mp.held_bytes(facts, w)
    assert (held.weights, held.optimizer) == (2 * facts.params + 4 * T, 8 * T)
    full = dataclasses.replace(w, lora_rank=0, offload_optimizer=True)
    P = facts.params
    assert mp.held_bytes(facts, full).optimizer == 0  # in host memory between updates
    # with the moments back: 4 P weights + 4 P gradients + 8 P moments + autocast's bf16 copy of the matrices
    assert mp.update_fixed(facts, full).total == 16 * P + 2 * facts.matrix_params


# ------------------------------------------------------------------ (b) against measured peaks

OFF = ["model.mixed_precision=autocast", "training.logprob_keep_logits=false", "model.torch_compile=false"]
LORA16 = ["model.lora.rank=16", "model.lora.alpha=32"]
# The per-phase peaks of benchmarks/results/h200 (NVIDIA H200, 139.8 GiB): torch's allocator in
# verl's process, memory_gb/rollout, memory_gb/update_actor and memory_gb/update_weights (the
# `memory` dict of each row; an engine's pool released by sleep mode is not counted, an awake
# in-process vLLM pool is). Settings as e2e_grpo.verl_config writes them: GRPO without KL, bfloat16,
# vLLM at gpu_memory_utilization 0.5 with sleep mode (sleep_when: needed), max_num_seqs = the
# batch, data.max_prompt_length 1024, packed micro-batches, no token budget set (derived from the
# free memory); prompt tokens: the row's tokens_per_step / sequences - max_new_tokens.
MEASURED = [
    # (file, arch, prompts, group, max_new_tokens, prompt tokens, keys, (rollout, update, sync) GiB)
    # 1bd5b06, before the update's speed switches were on by default (autocast, logits recomputed);
    # the engine stays awake through the update (sleep_when: needed), its pool in every figure
    ("e2e_grpo_a_smollm2_vllm_2026-12-02_session8.json", "smollm2-135m", 16, 8, 128, 77, OFF,
     (71.37, 95.42, 71.34)),
    # 63039ef, GPU defaults: param_copy, kept logits, torch_compile; engine awake
    ("e2e_grpo_a_smollm2_vllm_2026-12-02_session12.json", "smollm2-135m", 16, 8, 128, 77, [],
     (71.62, 85.96, 71.59)),
    # the speed switches on, as in the tuned_all run of the same session whose peaks are the same to the
    # 10 MiB (it sets them explicitly); the held 20.28 GiB between stages is param_copy's 14 B a parameter
    # (20.1 GiB), not autocast's 12 (17.3)
    ("e2e_grpo_b_qwen2-1.5b_vllm_2026-12-02_session11.json", "qwen2-1.5b", 32, 8, 512, 73, [],
     (89.62, 69.91, 89.36)),
    # bdf77e9, speed switches off (HISTORY.md item 6), training.offload_optimizer=true
    ("big-full-qwen2-7b_2026-12-02_session11.json", "qwen2-7b", 8, 4, 256, 72,
     OFF + ["training.offload_optimizer=true"], (96.55, 134.78, 96.45)),
    # bdf77e9, LoRA rank 16 (alpha 32, all linear layers), speed switches off; its sync peak (121.73)
    # is the whole merged copy the sync built then, not the 1 GiB buckets of now: see EXCLUDED
    ("big-lora-qwen2.5-14b_2026-12-02_session11.json", "qwen2.5-14b", 8, 4, 256, 72, OFF + LORA16,
     (96.76, 94.42, None)),
    # 63039ef, LoRA rank 16, GPU defaults then (kept logits on; LoRA: peft's layers, not compiled, autocast)
    ("big-lora-qwen2.5-32b_2026-12-02_session12.json", "qwen2.5-32b", 8, 4, 256, 72,
     LORA16 + ["model.lora.fused=false", "model.torch_compile=false"],
     (129.68, 107.54, 132.53)),
]
# Measured, not compared (the estimate models the code as it is now):
EXCLUDED = {
    "big-lora-qwen2.5-14b_2026-12-02_session11.json update_weights 121.73": "the sync then built every merged "
        "weight before loading (a second bf16 copy of the base); buckets of 1 GiB since: estimated 99.6 (-18%)",
    "big-lora-qwen2.5-32b_2026-12-02_session11.json": "out of memory at the first sync, the same whole copy",
    "e2e_grpo_*_session9.json": "before stage_memory subtracted the sleeping engine's pool (update 166 GiB on a "
        "139.8 GiB card)",
}
TOLERANCE = 0.15


def _plan_row(arch_dirs, arch, prompts, group, new, prompt_tokens, keys):
    cfg = load_config(None, [f"model.name={arch_dirs(arch)}", "model.dtype=bfloat16", "rollout.name=vllm",
                             "algorithm.name=grpo", "algorithm.use_kl_loss=false", f"training.batch_size={prompts}",
                             f"rollout.n={group}", f"rollout.max_new_tokens={new}", "data.max_prompt_length=1024",
                             f"rollout.max_num_seqs={prompts * group}"] + keys, platform=_gpu_platform())
    return preflight.plan_config(cfg, H200, "h200", prompt_tokens=prompt_tokens)[0]


@pytest.mark.parametrize("row", MEASURED, ids=[r[0] for r in MEASURED])
def test_estimate_within_15_percent_of_the_measured_peaks(arch_dirs, row):
    name, arch, prompts, group, new, prompt_tokens, keys, measured = row
    assert os.path.exists(os.path.join(BENCH, "results", "h200", name))
    p = _plan_row(arch_dirs, arch, prompts, group, new, prompt_tokens, keys)
    for stage, gib in zip(("rollout", "update", "sync"), measured):
        if gib is None:
            continue
        estimate = p.stage(stage).total / GIB
        assert abs(estimate - gib) <= TOLERANCE * gib, f"{name} {stage}: estimated {estimate:.1f}, measured {gib}"


def test_the_measured_files_hold_the_compared_figures():
    import json

    keys = ("rollout", "update_actor", "update_weights")
    for name, *_, measured in MEASURED:
        row = next(r for r in json.load(open(os.path.join(BENCH, "results", "h200", name)))["rows"]
                   if r["system"] == "verl-vllm")
        for key, gib in zip(keys, measured):
            if gib is not None:
                assert row["memory"][key] == gib, (name, key)


# ------------------------------------------------------------------ (c) the refusal


def test_verl_plan_refuses_14b_full_fine_tuning_on_an_h100(arch_dirs, capsys):
    from verl.cli import main

    rc = main(["plan", f"model.name={arch_dirs('qwen2.5-14b')}", "algorithm.name=grpo", "algorithm.use_kl_loss=false",
               "training.batch_size=8", "rollout.n=4", "rollout.max_new_tokens=256", "--card", "h100"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert "update" in out and "does not fit" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: memory: the update needs ~")
    assert "on this 79.1 GiB card (weights " in lines[0] and "gradients " in lines[0] and "optimizer " in lines[0]
    assert "set model.lora.rank=16" in lines[0]  # the single key that makes it fit; offloading does not


def test_an_engine_pool_smaller_than_its_weights_is_refused(arch_dirs, capsys):
    """vLLM at 0.15 of an H100 (11.9 GiB) cannot hold the 7B's 14.2 GiB of bf16 weights: it would not start."""
    from verl.cli import main

    rc = main(["plan", f"model.name={arch_dirs('qwen2-7b')}", "model.lora.rank=16", "algorithm.name=grpo",
               "training.batch_size=8", "rollout.n=4", "rollout.max_new_tokens=256",
               "rollout.gpu_memory_utilization=0.15", "--card", "h100", "--prompt_tokens", "72"])
    out, err = capsys.readouterr()
    assert rc == 2 and "the engine's pool is too small" in out
    assert err.strip().splitlines() == [
        "error: memory: the rollout engine needs ~15.2 GiB for its weights and one sequence, more than its pool of "
        "11.9 GiB (rollout.gpu_memory_utilization of this 79.1 GiB card): set rollout.gpu_memory_utilization=0.2 "
        "(training.memory_preflight=false skips this check)"]


def test_verl_plan_fits_and_names_the_card(arch_dirs, capsys):
    from verl.cli import main

    rc = main(["plan", f"model.name={arch_dirs('qwen2.5-14b')}", "model.lora.rank=16", "algorithm.name=grpo",
               "training.batch_size=8", "rollout.n=4", "rollout.max_new_tokens=256", "--card", "h200"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "card h200 (139.8 GiB)" in out and ": fits" in out
    for stage in ("rollout", "update", "sync"):
        assert f"\n{stage}" in out


def test_verl_plan_card_and_no_gpu(capsys):
    from verl.cli import main

    assert main(["plan", "--card", "tpu"]) == 2
    assert "not a card name" in capsys.readouterr().err
    assert mp.card_bytes("80")[0] == 80 * GIB and mp.card_bytes("h100")[0] == int(79.1 * GIB)
    import torch

    if not torch.cuda.is_available():
        assert main(["plan"]) == 2
        assert "--card" in capsys.readouterr().err


def test_train_refuses_before_weights_load(arch_dirs, monkeypatch, capsys):
    """On a CUDA device (here: a stand-in 79.1 GiB card) the run stops in one line, exit 2, before
    any model loads (the folder holds a config.json and nothing else)."""
    from verl.cli import main

    monkeypatch.setattr(preflight, "this_card", lambda config: (int(79.1 * GIB), "H100"))
    rc = main(["train", f"model.name={arch_dirs('qwen2.5-14b')}", "algorithm.name=grpo", "training.total_steps=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: memory: the update needs ~"), err


def test_train_lowers_a_set_token_budget_with_a_note(arch_dirs, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "this_card", lambda config: (int(79.1 * GIB), "H100"))
    cfg = load_config(None, [f"model.name={arch_dirs('qwen2-1.5b')}", "algorithm.name=grpo", "training.batch_size=32",
                             "rollout.n=8", "rollout.max_new_tokens=512", "data.max_prompt_length=512",
                             "training.max_tokens_per_micro_batch=131072"], platform=_gpu_platform())
    preflight.check_before_loading(cfg)
    lowered = cfg.training.max_tokens_per_micro_batch
    assert 1024 <= lowered < 131072
    assert "training.max_tokens_per_micro_batch 131072 -> " in capsys.readouterr().out
    p = preflight.plan_config(cfg, int(79.1 * GIB), "H100")[0]
    assert p.fits and p.micro_tokens == lowered


def test_off_on_cpu_and_with_the_key(arch_dirs, monkeypatch):
    cfg = load_config(None, [f"model.name={arch_dirs('qwen2.5-14b')}", "device=cpu"])
    preflight.check_before_loading(cfg)  # the CPU: nothing estimated, nothing refused
    monkeypatch.setattr(preflight, "this_card", lambda config: (int(79.1 * GIB), "H100"))
    cfg = load_config(None, [f"model.name={arch_dirs('qwen2.5-14b')}", "training.memory_preflight=false"])
    preflight.check_before_loading(cfg)
