"""SGLang backend on a CUDA GPU (run on the H200 with SGLang's packages on the path:
pytest -m gpu tests/gpu/test_gpu_sglang.py). SGLang has no CPU build, so every test here is marked `gpu`;
the CPU tests of this backend (its config errors, request building, result parsing, buckets) are in
tests/rollout/test_sglang_rollout.py.

The same checks as the vLLM backend's GPU tests (tests/gpu/test_gpu_vllm.py, whose helpers and
tolerances are reused; the reasons for the tolerances are given there): the Batch layout and greedy
tokens of the HF backend, sampled log-probs equal to the actor's at two temperatures, weight sync
that changes generations and brings rollout/logprob_diff back down, sleep/wake with the memory
released and the weights back, and the trainer on cuda through the CLI (a GRPO run, a stale engine
flagged with TIS on, a multi-turn tool run under async training).

One engine for the module (CUDA graphs off: capturing them costs start-up time and is not what is
checked), started with the memory saver and synced once from the HF model, as the trainer does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# greedy_paths, test_gpu_vllm's checks, test_vllm_rollout's helpers
sys.path[:0] = [TESTS, os.path.join(TESTS, "gpu"), os.path.join(TESTS, "rollout")]

import test_gpu_vllm as vllm_checks  # noqa: E402  (helpers only; vLLM itself is not imported)
from greedy_paths import assert_greedy_agree, model_forward  # noqa: E402
from test_vllm_rollout import responses_of  # noqa: E402
from verl.batch import Batch  # noqa: E402
from verl.config import RolloutConfig  # noqa: E402
from verl.rollout.base import SamplingParams  # noqa: E402

pytestmark = pytest.mark.gpu

ROOT = vllm_checks.ROOT
DEVICE, DTYPE = "cuda", "bfloat16"
LP_MEAN_TOL, LP_TOL, FORWARD_TOL = vllm_checks.LP_MEAN_TOL, vllm_checks.LP_TOL, vllm_checks.FORWARD_TOL
PROMPTS = vllm_checks.PROMPTS
diff_to, perturbed, prompt_batch = vllm_checks.diff_to, vllm_checks.perturbed, vllm_checks.prompt_batch
fixed_length = vllm_checks.fixed_length  # sets engine.extra_sampling_kwargs = {"ignore_eos": True}: SGLang's name too


# The tiny llama, its tokenizer and the bf16 HF model on cuda: the vLLM GPU tests' fixtures.
llama_path, tok, hf_model = vllm_checks.llama_path, vllm_checks.tok, vllm_checks.hf_model


@pytest.fixture(scope="module")
def cfg() -> RolloutConfig:
    return RolloutConfig(max_model_len=256, max_num_seqs=32, seed=1, gpu_memory_utilization=0.15,
                         enable_sleep_mode=True, enforce_eager=True)


@pytest.fixture(scope="module")
def engine(llama_path, tok, cfg, hf_model):
    from verl.rollout.sglang_rollout import SGLangRollout

    e = SGLangRollout(llama_path, tok, cfg, dtype=DTYPE, device=DEVICE)
    e.sync_weights(hf_model)
    yield e
    e.shutdown()


def test_same_batch_layout_keys_and_dtypes_as_hf_backend(engine, hf_model, tok, cfg):
    from verl.rollout.hf_rollout import HFRollout

    prompts = prompt_batch(tok)
    sampling = SamplingParams(n=2, max_new_tokens=12, greedy=True)
    with fixed_length(engine, hf_model, 12):
        ours = engine.generate(prompts, sampling)
        ref = HFRollout(hf_model, tok, cfg).generate(prompts, sampling)
    for name in Batch.tensor_fields():
        a, b = getattr(ours, name), getattr(ref, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device), name
    for name in ("input_ids", "attention_mask", "position_ids"):
        assert torch.equal(getattr(ours, name)[:, :ours.prompt_length], getattr(ref, name)[:, :ref.prompt_length])
    assert torch.equal(ours.response_mask, ref.response_mask) and bool((ours.response_mask == 1).all())
    assert torch.equal(ours.input_ids[:, ours.prompt_length:], ours.responses)
    assert_greedy_agree(model_forward(hf_model), ours, ref, lp_tol=LP_TOL, forward_tol=FORWARD_TOL)
    for name in ("prompt_text", "ground_truth", "data_source", "extra", "group_id", "truncated"):
        assert getattr(ours, name) == getattr(ref, name), name
    assert ours.group_id == [f"g{i}" for i in range(len(PROMPTS)) for _ in range(2)]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_log_probs_equal_the_actors(engine, hf_model, tok, temperature):
    """SGLang reports log_softmax(logits / T) of each sampled token: what the actor recomputes."""
    out = engine.generate(prompt_batch(tok), SamplingParams(n=4, max_new_tokens=16, temperature=temperature, seed=5))
    assert len(out) == 4 * len(PROMPTS) and out.rollout_log_probs.dtype == torch.float32
    assert (out.rollout_log_probs <= 0).all() and (out.rollout_log_probs[out.response_mask == 0] == 0).all()
    assert diff_to(hf_model, out, temperature) < LP_MEAN_TOL
    assert len({tuple(r) for r in responses_of(out)[:4]}) > 1  # n samples of one prompt are different draws


def test_eos_and_stop_strings_stay_in_the_response(engine, tok):
    """EOS ends a finished row (not truncated) and is kept; a stop string's tokens are kept too."""
    out = engine.generate(prompt_batch(tok), SamplingParams(n=2, max_new_tokens=48, temperature=1.0))
    rows = responses_of(out)
    for r, truncated in zip(rows, out.truncated):
        assert truncated or r[-1] == tok.eos_token_id, r
    stop = engine.generate(prompt_batch(tok), SamplingParams(n=2, max_new_tokens=48, temperature=1.0, stop=["e"]))
    for text, truncated, r in zip(stop.response_text, stop.truncated, responses_of(stop)):
        assert truncated or r[-1] == tok.eos_token_id or text.endswith("e") or "e" in tok.decode(r[-1:]), text


def test_sync_changes_generations_and_logprob_diff_drops_back(engine, hf_model, tok):
    prompts = prompt_batch(tok)
    greedy = SamplingParams(n=1, max_new_tokens=16, greedy=True)
    actor = perturbed(hf_model)
    try:
        with fixed_length(engine, None, 16):
            stale = engine.generate(prompts, greedy)
            stale_diff = diff_to(actor, stale)
            assert diff_to(hf_model, stale) < LP_MEAN_TOL
            metrics = engine.sync_weights(actor)
            fresh = engine.generate(prompts, greedy)
        fresh_diff = diff_to(actor, fresh)
        assert fresh_diff < LP_MEAN_TOL and stale_diff > 0.2 and stale_diff > 4 * fresh_diff, (fresh_diff, stale_diff)
        assert responses_of(fresh) != responses_of(stale)
        n_bytes = sum(p.numel() * p.element_size() for p in actor.parameters())
        assert metrics["rollout/weight_sync_bytes"] == n_bytes and metrics["timing_s/update_weights"] > 0
    finally:
        engine.sync_weights(hf_model)
    assert diff_to(hf_model, engine.generate(prompts, greedy)) < LP_MEAN_TOL


def test_sleep_releases_memory_and_weights_come_back(engine, hf_model, tok):
    prompts = prompt_batch(tok)
    greedy = SamplingParams(n=2, max_new_tokens=16, greedy=True)
    before = engine.generate(prompts, greedy)
    source = engine._source
    try:
        for level in (2, 1):  # 2: everything released, weights re-synced; 1: the KV cache only
            if level == 1:
                engine._source = None
            free_before = vllm_checks.free_gib()
            slept = engine.sleep()
            freed = vllm_checks.free_gib() - free_before
            assert engine.asleep and slept["rollout/sleep_level"] == level
            # The KV cache (most of 0.15 x the GPU) is released while asleep: measured, and reported.
            assert freed > 2.0 and abs(slept["rollout/sleep_freed_gib"] - freed) < 1.0, (freed, slept)
            woke = engine.wake_up()
            assert not engine.asleep and woke["rollout/wake_s"] > 0 and woke["rollout/wake_taken_gib"] > 2.0
            after = engine.generate(prompts, greedy)
            assert responses_of(after) == responses_of(before), level
            torch.testing.assert_close(after.rollout_log_probs, before.rollout_log_probs, atol=1e-3, rtol=0)
    finally:
        engine._source = source
    actor = perturbed(hf_model, seed=1)
    try:
        engine.sleep()
        metrics = engine.sync_weights(actor)  # the trainer's order: sleep, update, sync (wakes)
        assert not engine.asleep
        for key in ("rollout/sleep_s", "rollout/sleep_freed_gib", "rollout/wake_s"):
            assert metrics[key] > 0, key
        assert diff_to(actor, engine.generate(prompts, greedy)) < LP_MEAN_TOL
    finally:
        engine.sync_weights(hf_model)


def test_wake_up_after_an_update_left_memory_reserved_in_pytorch(engine, tok):
    vllm_checks.check_wake_after_memory_left_reserved(engine, tok)  # SGLang's scheduler is another process


def test_unsupported_architecture_is_one_line(tmp_path, tok, cfg):
    from verl.rollout.sglang_rollout import SGLangRollout

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["NoSuchModelForCausalLM"]}))
    with pytest.raises(ValueError, match="rollout.name: sglang does not support the architecture NoSuchModel"):
        SGLangRollout(str(tmp_path), tok, cfg, dtype=DTYPE, device=DEVICE)


# ---------------------------------------------------------------------------
# The trainer on cuda (child processes)
# ---------------------------------------------------------------------------


def _run_cli(tmp_path, args: list, timeout: int = 600) -> list[dict]:
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "verl.cli", "train", *args, "logging.backends=[jsonl]",
                           "logging.progress_bar=false", f"device={DEVICE}", "--save_dir", str(out)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def test_grpo_three_steps_through_the_cli_with_sglang(tmp_path, llama_path):
    rows = _run_cli(tmp_path, [f"model.name={llama_path}", f"model.dtype={DTYPE}", "rollout.name=sglang",
                               "algorithm.name=grpo", "training.total_steps=3", "training.batch_size=4",
                               "rollout.max_new_tokens=16", "rollout.enforce_eager=true",
                               "rollout.gpu_memory_utilization=0.2", "rollout.sleep_when=always"])
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["reward/mean"] is not None and r["rollout/logprob_diff"] < LP_MEAN_TOL, r
        assert r["timing_s/update_weights"] > 0
        assert r["rollout/sleep_freed_gib"] > 1.0 and r["rollout/sleep_s"] > 0 and r["rollout/wake_s"] > 0, r


def test_grpo_on_an_moe_model_with_sglangs_routing_replayed(tmp_path):
    """The tiny Qwen3-MoE on SGLang: experts synced in the checkpoint layout, the engine's routed experts
    replayed in the update (rollout.routing_replay: engine; verl/rollout/engine_routing.py)."""
    rows = _run_cli(tmp_path, ["model.name=tiny:qwen3_moe", f"model.dtype={DTYPE}", "rollout.name=sglang",
                               "algorithm.name=grpo", "training.total_steps=3", "training.batch_size=4",
                               "rollout.max_new_tokens=16", "rollout.enforce_eager=true",
                               "rollout.gpu_memory_utilization=0.2", "rollout.routing_replay=engine"])
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["rollout/logprob_diff"] < LP_MEAN_TOL and r["moe/load_max_over_mean"] >= 1.0 for r in rows), rows


def test_sigterm_saves_full_state_and_resume_completes_with_sglang(tmp_path, llama_path):
    """SGLang installs SIGTERM/SIGQUIT handlers of its own; the engine gives SIGTERM back to the
    trainer's graceful stop: the step finishes, the full state is saved, exit 0, and --resume auto
    finishes the run with every step logged once."""
    import signal
    import time

    out = tmp_path / "run"
    args = [sys.executable, "-m", "verl.cli", "train", f"model.name={llama_path}", f"model.dtype={DTYPE}",
            "rollout.name=sglang", "algorithm.name=grpo", "training.total_steps=4", "training.batch_size=4",
            "rollout.max_new_tokens=16", "rollout.enforce_eager=true", "rollout.gpu_memory_utilization=0.2",
            "logging.backends=[jsonl]", "logging.progress_bar=false", f"device={DEVICE}", "--save_dir", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (metrics.exists() and metrics.read_text().strip()):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert "stopped by SIGTERM after step" in stdout and "full state saved to" in stdout, stdout[-2000:]
    latest = (out / "checkpoints" / "latest_full").read_text().strip()
    stopped_at = json.loads((out / "checkpoints" / latest / "trainer_state.json").read_text())["global_step"]
    assert 1 <= stopped_at < 4
    done = subprocess.run(args + ["--resume", "auto"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4]


STALE_SCRIPT = vllm_checks.STALE_SCRIPT.replace('"name": "vllm"', '"name": "sglang"')


def test_stale_engine_is_flagged_by_logprob_diff_with_tis(tmp_path, llama_path):
    """As the vLLM test: the weight sync switched off, TIS on; steps 2 and 3 sample with stale weights."""
    assert '"name": "sglang"' in STALE_SCRIPT
    proc = subprocess.run([sys.executable, "-c", STALE_SCRIPT, llama_path, DEVICE, DTYPE, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.split("ROWS ")[-1])
    fresh, stale = rows[0]["rollout/logprob_diff"], [r["rollout/logprob_diff"] for r in rows[1:]]
    assert fresh < LP_MEAN_TOL, rows
    assert all(d > 0.2 and d > 4 * fresh for d in stale), rows


def test_multi_turn_tool_run_on_sglang_under_async_training(tmp_path):
    """The CPU agent recipe (calculator tool, tiny Qwen2 chat model) on SGLang, with generation one
    step ahead of the update (async_training, staleness 1): tool calls run, their tokens are masked,
    and the version tags show the staleness."""
    recipe = os.path.join(ROOT, "examples", "agent_calculator_cpu.yaml")
    rows = _run_cli(tmp_path, [recipe, "rollout.name=sglang", "model.dtype=bfloat16", "training.total_steps=3",
                               "rollout.enforce_eager=true",
                               "rollout.gpu_memory_utilization=0.2", "async_training.enable=true",
                               "async_training.max_staleness=1"])
    rows = [r for r in rows if r["step"] >= 1]  # the recipe validates before step 1 (a step-0 row of val/*)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["agent/turns_per_trajectory"] >= 1 for r in rows), rows
    assert any(r["agent/tool_calls_per_trajectory"] > 0 for r in rows), rows
    assert all(0 < r["agent/masked_token_share"] < 1 for r in rows if r["agent/tool_calls_per_trajectory"] > 0), rows
    assert all(r["rollout/logprob_diff"] < 1.0 for r in rows), rows
    assert max(r["async/staleness_max"] for r in rows) <= 1, rows
