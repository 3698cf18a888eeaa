"""benchmarks/e2e_grpo.py's work axis, on a CPU without TRL, vLLM or a GPU: the settings each side
gets per work mode (verl's config, TRL's GRPOConfig keywords, the worker command), the row captions, the
step spread, ratios within one work mode, the merge of two runs, and the TRL generation probe's replay
against a stand-in engine."""

from __future__ import annotations

import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import common  # noqa: E402
import e2e_grpo  # noqa: E402
import e2e_report  # noqa: E402
import e2e_trl  # noqa: E402
import e2e_work  # noqa: E402
import trl_generation_probe as probe  # noqa: E402

LL = "like-for-like"


def _worker_args(system, work, *extra):
    args = e2e_grpo.parse(["--worker", system, "--work", work, "--device", "cpu", "--systems", system, "--prompts",
                           "32", "--group", "8", "--max-new-tokens", "512", "--warmup", "1", *extra])
    args.system, args.model_path = system, "/m"
    return args


def test_verl_config_per_work_mode_validates():
    from verl.config import config_from_dict

    cpu = common.resolve_device("cpu")
    ll = config_from_dict(e2e_grpo.verl_config(_worker_args("verl-vllm", LL), cpu, 6))
    assert (ll.rollout.logprob_check_every, ll.rollout.tis_cap) == (1, 0.0)
    assert ll.training.old_log_probs_from_update is True and ll.model.enable_gradient_checkpointing is False
    raw = e2e_grpo.verl_config(_worker_args("verl-vllm", "defaults"), cpu, 6)
    assert "logprob_check_every" not in raw["rollout"] and "tis_cap" not in raw["rollout"]  # verl's own defaults
    assert "old_log_probs_from_update" not in raw["training"]
    # --verl-set comes after the work's keys: it wins
    over = e2e_grpo.verl_config(_worker_args("verl-vllm", LL, "--verl-set", "rollout.logprob_check_every=3"), cpu, 6)
    assert over["rollout"]["logprob_check_every"] == 3


def test_trl_kwargs_defaults_vs_like_for_like():
    d = e2e_trl.trl_config_kwargs(_worker_args("trl-vllm", "defaults"), "cuda", "/o")
    assert (d["per_device_train_batch_size"], d["gradient_accumulation_steps"]) == (256, 1)
    assert d["gradient_checkpointing"] is True and d["vllm_importance_sampling_correction"] is True
    assert d["use_vllm"] and d["vllm_mode"] == "colocate" and d["generation_kwargs"] == {"ignore_eos": True}
    assert d["model_init_kwargs"]["dtype"] == "float32" and d["max_steps"] == 6  # 1 warm-up + 5 timed (default)
    ll = e2e_trl.trl_config_kwargs(_worker_args("trl-vllm", LL, "--trl-micro-batch", "32"), "cuda", "/o")
    assert (ll["per_device_train_batch_size"], ll["gradient_accumulation_steps"]) == (32, 8)
    assert ll["gradient_checkpointing"] is False and ll["vllm_importance_sampling_correction"] is False
    # verl's requests carry detokenize=False; TRL reads token ids only, so an expert turns vLLM's decoding off too
    assert ll["generation_kwargs"] == {"ignore_eos": True, "detokenize": False}
    # everything but the work's keys is the same work
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
            "vllm_importance_sampling_correction", "generation_kwargs")
    assert {k: v for k, v in d.items() if k not in keys} == {k: v for k, v in ll.items() if k not in keys}
    # the micro-batch flag does not touch the defaults row (TRL's own layout: one micro-batch)
    d32 = e2e_trl.trl_config_kwargs(_worker_args("trl-vllm", "defaults", "--trl-micro-batch", "32"), "cuda", "/o")
    assert d32["per_device_train_batch_size"] == 256


def test_trl_kwargs_hf_generate_and_lora():
    hf = e2e_trl.trl_config_kwargs(_worker_args("trl", LL), "cpu", "/o")
    assert "vllm_importance_sampling_correction" not in hf and "use_vllm" not in hf and hf["use_cpu"]
    lora_ll = e2e_trl.trl_config_kwargs(_worker_args("trl-vllm", LL, "--lora-rank", "16"), "cuda", "/o")
    lora_d = e2e_trl.trl_config_kwargs(_worker_args("trl-vllm", "defaults", "--lora-rank", "16"), "cuda", "/o")
    assert lora_ll["model_init_kwargs"]["dtype"] == "bfloat16" and lora_ll["bf16"] is True  # bf16 base, as verl's
    assert lora_d["model_init_kwargs"]["dtype"] == "float32"
    assert e2e_work.trl_weight_dtype("defaults", "trl-bf16-static", False) == "bfloat16"


def test_trl_micro_batches_must_divide():
    assert e2e_work.trl_micro_batches(256, None) == (256, 1)
    assert e2e_work.trl_micro_batches(128, 16) == (16, 8)
    with pytest.raises(ValueError, match="must divide"):
        e2e_work.trl_micro_batches(256, 48)
    with pytest.raises(ValueError, match="work"):
        e2e_work.verl_settings("same")


def test_captions_say_what_each_side_computed():
    n = 256
    caps = {(s, w): e2e_work.caption(s, w, 32, n) for s in ("verl-vllm", "trl-vllm", "real-verl", "verl-hf", "trl")
            for w in e2e_work.WORK_MODES}
    assert len(set(caps.values())) == len(caps)  # every row says something of its own
    assert "1 step in 10" in caps["verl-vllm", "defaults"] and "every step" in caps["verl-vllm", LL]
    assert "IS correction on" in caps["trl-vllm", "defaults"] and "checkpointing on" in caps["trl-vllm", "defaults"]
    assert "IS correction off" in caps["trl-vllm", LL] and "32 x 8" in caps["trl-vllm", LL]
    assert "old-log-prob pass" in caps["real-verl", "defaults"] and "FSDP1" in caps["real-verl", "defaults"]
    assert "bypass_mode" in caps["real-verl", LL] and "FSDP2" in caps["real-verl", LL]
    assert "bf16 LoRA base" in e2e_work.caption("trl-vllm", LL, 16, 128, lora=True)


def test_worker_command_carries_the_work_and_peer_flags():
    args = e2e_grpo.parse(["--device", "cpu", "--systems", "verl-vllm", "trl-vllm", "real-verl", "--work",
                           "defaults", LL, "--trl-micro-batch", "32", "--trl-gen-probe", "3", "--logs", "/l"])
    args.model_path = "/m"
    assert args.work == ["defaults", LL] and args.steps == 5
    verl = e2e_grpo.worker_command(args, "verl-vllm", LL)
    trl = e2e_grpo.worker_command(args, "trl-vllm", LL)
    real = e2e_grpo.worker_command(args, "real-verl", "defaults")
    assert verl[verl.index("--work") + 1] == LL and "--trl-micro-batch" not in verl
    assert trl[trl.index("--trl-micro-batch") + 1] == "32" and trl[trl.index("--trl-gen-probe") + 1] == "3"
    assert real[real.index("--logs") + 1] == os.path.join("/l", "real_verl_defaults")  # one log folder per mode
    with pytest.raises(SystemExit):  # a worker computes one row
        e2e_grpo.parse(["--worker", "trl", "--device", "cpu", "--work", "defaults", LL])


def _steps(walls, tokens=1000):
    return [dict(step=i, wall_s=w, tokens=tokens, stages={"rollout": w / 2, "rest": w / 2}) for i, w in
            enumerate(walls)]


def test_summarize_gives_median_and_spread():
    args = _worker_args("trl-vllm", LL)
    row = e2e_report.summarize("trl-vllm", dict(steps=_steps([9.0, 2.0, 1.0, 4.0, 3.0, 5.0])), args)
    assert row["steps_timed"] == 5  # the warm-up step (9 s) is left out
    assert (row["step_s"], row["step_min_s"], row["step_max_s"]) == (3.0, 1.0, 5.0)
    assert row["step_iqr_s"] == 2.0  # quartiles 2 and 4 of 1..5
    assert e2e_report.spread([2.5])["iqr"] == 0.0
    assert "engine_logprob_steps" not in row  # no engine metrics (TRL): nothing to count
    steps = _steps([9.0, 1.0, 2.0, 3.0, 4.0])
    for i, s in enumerate(steps):
        checked = {"rollout/logprob_diff": 0.001 * i, "rollout/is_ratio_p999": 1.0 + 0.01 * i}
        s["engine"] = {"rollout/engine_call_s": 0.5, **(checked if i in (0, 2, 3) else {})}
    row = e2e_report.summarize("verl-vllm", dict(steps=steps), args)
    assert row["engine_logprob_steps"] == 2  # steps 2 and 3: the warm-up (0) is not timed
    # medians over those two steps only (not over the timed steps without a check, as 0):
    # (0.002 + 0.003) / 2 = 0.0025 and (1.02 + 1.03) / 2 = 1.025
    assert row["logprob_diff"] == pytest.approx(0.0025) and row["is_ratio_p999"] == pytest.approx(1.025)


def test_ratios_stay_within_one_work_mode():
    rows = [dict(system="verl-vllm", work="defaults", tokens_per_s=300), dict(system="trl-vllm", work="defaults",
            tokens_per_s=100), dict(system="verl-vllm", work=LL, tokens_per_s=200),
            dict(system="trl-vllm", work=LL, tokens_per_s=100), dict(system="real-verl", work=LL, tokens_per_s=50)]
    e2e_report.add_ratios(rows)
    assert rows[0]["x_trl_vllm"] == 3.0 and "x_real_verl" not in rows[0]
    assert rows[2]["x_trl_vllm"] == 2.0 and rows[2]["x_real_verl"] == 4.0
    rows[3].update(caption="t", gen_probe=dict(trl_generate_s=1.5, replay_same_params_s=0.5, sampling_params="x"))
    notes = e2e_report.caption_notes(rows)
    assert "- trl-vllm (like-for-like): t" in notes and "trl_generate_s 1.5, replay_same_params_s 0.5" in notes
    assert "sampling_params" not in notes


def _run(step_s, step_min, step_max, trl_s, caption="c"):
    return dict(machine=dict(date="d", gpu="H200"), rows=[
        dict(system="verl-vllm", work=LL, step_s=step_s, step_min_s=step_min, step_max_s=step_max, steps_timed=5,
             tokens_per_step=1000, rollout_s=step_s / 2, engine_logprob_steps=5, caption=caption,
             logprob_diff=0.0012 * step_s, is_ratio_p999=1.0 + 0.0012 * step_s,
             floor_work=dict(decode_bytes=4.8e11 * step_s, update_flops=1e12, sync_bytes=1e9, lengths="measured")),
        dict(system="trl-vllm", work=LL, step_s=trl_s, steps_timed=5, tokens_per_step=1000, caption="t"),
        dict(system="real-verl", error="timeout after 420s")])


def test_merge_two_runs(tmp_path):
    rows = e2e_report.merge_rows([_run(1.0, 0.9, 1.2, 3.0), _run(2.0, 1.8, 2.5, 4.0)])
    verl = next(r for r in rows if r["system"] == "verl-vllm")
    assert verl["step_s"] == 1.5 and (verl["runs_min_s"], verl["runs_max_s"]) == (1.0, 2.0)  # median of medians
    assert (verl["step_min_s"], verl["step_max_s"], verl["steps_timed"], verl["runs"]) == (0.9, 2.5, 10, 2)
    assert verl["tokens_per_s"] == 667 and verl["rollout_s"] == 0.75 and verl["engine_logprob_steps"] == 10
    assert verl["x_trl_vllm"] == round(667 / 286, 2)  # TRL: 1000 / 3.5 s
    # the mismatch: medians of 0.0012 and 0.0024, and of 1.0012 and 1.0024, kept to 4 places
    assert verl["logprob_diff"] == 0.0018 and verl["is_ratio_p999"] == 1.0018
    # the floor quantities: medians over the runs (decode bytes 4.8e11 and 9.6e11 -> 7.2e11)
    assert verl["floor_work"] == dict(decode_bytes=7.2e11, update_flops=1e12, sync_bytes=1e9, lengths="measured")
    assert [r["system"] for r in rows] == ["verl-vllm", "trl-vllm"]  # a failed row has nothing to merge
    with pytest.raises(ValueError, match="captions differ"):
        e2e_report.merge_rows([_run(1.0, 0.9, 1.2, 3.0), _run(2.0, 1.8, 2.5, 4.0, caption="other")])
    paths = []
    for i, run in enumerate((_run(1.0, 0.9, 1.2, 3.0), _run(2.0, 1.8, 2.5, 4.0))):
        paths.append(str(tmp_path / f"r{i}.json"))
        json.dump(run, open(paths[-1], "w"))
    e2e_report.merge_main(["merge", *paths, "--out", str(tmp_path / "m")])
    merged = json.load(open(tmp_path / "m" / "e2e_grpo_merged.json"))
    assert merged["rows"][0]["step_s"] == 1.5 and merged["sources"] == paths
    # on the H200 (4.8 TB/s): a generation floor of 7.2e11 / 4.8e12 = 0.15 s against the merged rollout_s of 0.75
    assert merged["rows"][0]["gen_floor_pct"] == 20.0
    assert "generation 0.150 s (0.72 TB)" in open(tmp_path / "m" / "e2e_grpo_merged.md").read()
    assert "verl-vllm (like-for-like): c" in open(tmp_path / "m" / "e2e_grpo_merged.md").read()


def test_rows_carry_their_floors_from_their_own_lengths(monkeypatch):
    from types import SimpleNamespace

    # the tiny config of tests/benchmarks/test_benchmark_floor.py: trunk 144, head 40, attention width 4, KV 8 bytes a token
    cfg = SimpleNamespace(hidden_size=4, num_attention_heads=2, num_key_value_heads=1, head_dim=2,
                          intermediate_size=8, num_hidden_layers=1, vocab_size=10, tie_word_embeddings=True)
    args = _worker_args("verl-vllm", LL, "--max-new-tokens", "2")
    steps = [dict(step=i, wall_s=1.0, tokens=6, stages={"rollout": 0.5, "update_actor": 0.25, "update_weights": 0.1},
                  lengths=[[1, 2], [1, 2]]) for i in range(3)]
    monkeypatch.setattr(e2e_report.common, "hf_config", lambda arch: cfg)
    row = e2e_report.summarize("verl-vllm", dict(steps=steps), args)
    nominal = e2e_report.summarize("verl-vllm", dict(steps=[{k: v for k, v in s.items() if k != "lengths"}
                                                         for s in steps]), args)
    # update: 3 F_mm + 3 F_attn = 3 * 2048 + 3 * 192 = 6720 FLOPs; decode: 2 steps * 368 B + 8 B * 2 * (2*1 + 1) = 784
    assert row["floor_work"] == dict(decode_bytes=784, update_flops=6720, sync_bytes=368, lengths="measured")
    assert (row["resp_len_median"], row["resp_len_max"], row["at_max_share"]) == (2, 2, 1.0)
    # without recorded lengths the floors come from the row's mean lengths, and the row says so
    assert nominal["floor_work"]["lengths"] == "nominal" and "resp_len_median" not in nominal
    h100 = dict(row, rollout_s=784 / 3.35e12 * 4, update_s=6720 / 989e12 * 2, sync_s=None)
    e2e_report.add_floors([h100], "NVIDIA H100 80GB HBM3")
    # generation at 25% of its floor, the update at 50% MFU; no sync time measured: no fraction
    assert (h100["gen_floor_pct"], h100["update_mfu_pct"], h100["sync_floor_pct"]) == (25.0, 50.0, None)
    cpu = dict(row)
    e2e_report.add_floors([cpu], None)  # no card: no floors
    assert "gen_floor_pct" not in cpu and e2e_report.floor_notes([cpu], None) == ""
    assert "update 0.000 s (0.0 TFLOP)" in e2e_report.floor_notes([h100], "NVIDIA H100 80GB HBM3")


def test_stage_profile_names_the_stage_behind_and_the_ceiling():
    rows = [dict(system="verl-vllm", work=LL, step_s=8.0, rollout_s=4.0, sync_s=0.5, update_s=3.0),
            dict(system="trl-vllm", work=LL, step_s=10.0, rollout_s=5.0, sync_s=0.1, update_s=4.9),
            dict(system="verl-vllm", work="defaults", step_s=2.0),  # no rollout_s: no line
            dict(system="real-verl", work=LL, error="timeout")]  # no step: not a peer
    rows[0]["update_floor_s"] = 1.0  # add_floors: our update at the GPU's peak rate
    text = e2e_report.stage_profile(rows)
    line = next(ln for ln in text.splitlines() if ln.startswith("- "))
    # the rest of the step: 8 - 4 - 0.5 = 3.5 against 10 - 5 - 0.1 = 4.9; only the sync is slower on our side
    assert "generation 4.00 vs 5.00; weight sync 0.50 vs 0.10; update and the rest 3.50 vs 4.90" in line
    assert "Behind in: weight sync." in line
    # ceiling 10 / 4 = 2.5x; with an update of 1 s at the peak rate (ours 3 s: 33%): 10 / (4 + 1) = 2.0x
    assert "2.50x" in line and "ours runs at 33% of it" in line and line.endswith("2.00x")
    assert len([ln for ln in text.splitlines() if ln.startswith("- ")]) == 1
    assert e2e_report.stage_profile(rows[2:]) == ""
    rows[0].update(wake_s=0.4, sleep_s=0.1)  # a sleeping engine: its wake-up is inside our sync stage
    assert "wake-up, 0.40 s with the reload, and the rest its sleep, 0.10 s)" in e2e_report.stage_profile(rows)


class _Params:
    def __init__(self, **kw):
        self.__dict__.update(n=1, logprobs=0, max_tokens=8, **kw)

    def clone(self):  # as vllm.SamplingParams.clone: a copy
        out = _Params()
        out.__dict__.update(self.__dict__)
        return out


class _Engine:
    """Stands in for vllm.LLM: records each call's request count and parameters."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append((len(prompts), sampling_params.n, sampling_params.logprobs,
                           getattr(sampling_params, "flat_logprobs", False), getattr(sampling_params, "detokenize", True)))
        return ["out"] * len(prompts) * sampling_params.n


def test_generation_probe_replays_the_exact_call():
    llm = _Engine()
    rec = probe.EngineCallRecorder(llm)
    params = _Params(temperature=1.0)
    prompts = [{"prompt_token_ids": [p]} for p in (1, 1, 2, 2, 3, 3)]  # TRL: each prompt `group` times, n=1
    for _ in range(3):  # warm-up + 2 timed steps, as TRL calls it
        assert llm.generate(prompts, sampling_params=params, use_tqdm=False) == ["out"] * 6
    assert len(rec.seconds) == 3 and rec.calls[1]["sampling_params"] is params
    replays = probe.replay(rec, group=2, repeats=2)
    # same, no log-probs, flat log-prob lists, n=group, then detokenize flipped (the recorded call's is on: off)
    assert llm.calls[3:] == ([(6, 1, 0, False, True)] * 2 + [(6, 1, None, False, True)] * 2
                             + [(6, 1, 0, True, True)] * 2 + [(3, 2, 0, False, True)] * 2 + [(6, 1, 0, False, False)] * 2)
    assert "replay_no_detokenize_s" in replays and "replay_detokenize_on_s" not in replays
    # TRL's like-for-like call already has detokenize off: the same-params replay keeps it off, the flip turns it on
    llm_off = _Engine()
    rec_off = probe.EngineCallRecorder(llm_off)
    llm_off.generate(prompts, sampling_params=_Params(detokenize=False), use_tqdm=False)
    replays_off = probe.replay(rec_off, group=2, repeats=1)
    assert [c[4] for c in llm_off.calls[1:]] == [False, False, False, False, True]
    assert "replay_detokenize_on_s" in replays_off and "replay_no_detokenize_s" not in replays_off
    assert params.logprobs == 0 and params.n == 1  # the variants were clones: TRL's own object is untouched
    assert not hasattr(params, "flat_logprobs") and not hasattr(params, "detokenize")
    assert len(rec.seconds) == 3  # the replays are not counted as TRL's calls
    s = probe.summary([0.5, 0.3, 0.3], rec, replays, probe.engine_settings(llm), warmup=1)
    assert s["trl_generate_s"] == 0.3 and s["around_engine_s"] == round(0.3 - s["trl_engine_call_s"], 4)
    assert s["requests"] == 6 and s["engine_settings"]["max_num_seqs"] is None  # no vLLM config on the stand-in
    rec.restore()
    assert llm.generate.__func__ is _Engine.generate
    with pytest.raises(ValueError, match="whole groups"):
        probe.unique_prompts(prompts[:5], 2)
    with pytest.raises(RuntimeError, match="no engine call"):
        probe.replay(probe.EngineCallRecorder(_Engine()), 2, 1)


def test_grpo_config_takes_the_kwargs():
    """TRL 1.16 (a test extra): its real GRPOConfig accepts every keyword,
    and like-for-like lands on TRL's no-old-log-prob-pass branch (grpo_trainer.py: the pass runs when
    gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0 or the IS correction is on)."""
    import trl  # installed by scripts/install_cpu.sh --test (pyproject test extra)
    for work, extra in (("defaults", []), (LL, ["--trl-micro-batch", "16"]),
                        (LL, ["--trl-micro-batch", "16", "--lengths", "realistic", "--eos-bias", "6.5", "--eos-id", "0"])):
        c = trl.GRPOConfig(**e2e_trl.trl_config_kwargs(_worker_args("trl-vllm", work, *extra), "cpu", "/tmp/o"))
        assert c.generation_kwargs.get("logit_bias") == ({0: 6.5} if "--lengths" in extra else None)
        assert c.generation_batch_size == 256  # one generation of all completions per optimizer step
        old_pass = (c.gradient_accumulation_steps % (c.steps_per_generation * c.num_iterations) != 0
                    or c.vllm_importance_sampling_correction)
        assert old_pass is (work == "defaults") and c.gradient_checkpointing is (work == "defaults")


REAL = ("--lengths", "realistic", "--eos-bias", "6.5", "--eos-id", "0")


def test_realistic_lengths_reach_both_sides_alike():
    verl_args = _worker_args("verl-vllm", LL, *REAL)
    trl_args = _worker_args("trl-vllm", LL, *REAL, "--trl-micro-batch", "32")
    trl = e2e_trl.trl_config_kwargs(trl_args, "cuda", "/o")
    # the one stop dict on both sides: verl's extra sampling fields, TRL's generation_kwargs (+ its detokenize)
    assert e2e_work.stop_kwargs(verl_args.eos_bias, verl_args.eos_id) == {"logit_bias": {0: 6.5}}
    assert trl["generation_kwargs"] == {"logit_bias": {0: 6.5}, "detokenize": False}
    assert e2e_work.stop_kwargs() == {"ignore_eos": True}  # fixed lengths, as before
    with pytest.raises(ValueError, match="EOS id"):
        e2e_work.stop_kwargs(6.5)
    # verl: the like-for-like keys plus the lifted engine-vs-actor thresholds (the bias is in the engine's log-probs)
    cfg = e2e_grpo.verl_config(verl_args, common.resolve_device("cpu"), 6)
    assert cfg["training"]["logprob_diff_stop"] == 1e6 and cfg["training"]["old_log_probs_from_update"] is True
    assert "logprob_diff_stop" not in e2e_grpo.verl_config(_worker_args("verl-vllm", LL), common.resolve_device("cpu"),
                                                            6)["training"]
    # the same varied prompts on both sides (a quarter to all of 16 words); fixed: all 16 words
    assert cfg["data"]["prompts"] == e2e_grpo.step_prompts(trl_args)
    words = {len(p.split()) - 2 for p in cfg["data"]["prompts"]}  # less "Prompt i:"
    assert min(words) >= 4 and max(words) == 16 and len(words) > 5
    assert {len(p.split()) - 2 for p in e2e_grpo.step_prompts(_worker_args("verl-vllm", LL))} == {16}
    assert "logit bias 6.5" in e2e_work.caption("trl-vllm", LL, 32, 256, lengths="realistic", eos_bias=6.5)
    with pytest.raises(ValueError, match="lengths"):
        e2e_work.verl_settings(LL, "sampled")


def test_realistic_lengths_command_line():
    args = e2e_grpo.parse(["--device", "cpu", "--systems", "verl-vllm", "trl-vllm", "--lengths", "realistic"])
    args.model_path, args.eos_bias, args.eos_id = "/m", 6.5, 0
    cmd = e2e_grpo.worker_command(args, "trl-vllm", LL)
    assert cmd[cmd.index("--lengths") + 1] == "realistic" and cmd[cmd.index("--eos-bias") + 1] == "6.5"
    assert cmd[cmd.index("--eos-id") + 1] == "0"
    fixed = e2e_grpo.parse(["--device", "cpu", "--systems", "verl-vllm"])
    fixed.model_path = "/m"
    assert "--eos-bias" not in e2e_grpo.worker_command(fixed, "verl-vllm", LL)
    with pytest.raises(SystemExit):  # the bias travels in vLLM's sampling parameters: HF systems cannot take it
        e2e_grpo.parse(["--device", "cpu", "--systems", "verl-vllm", "trl", "--lengths", "realistic"])


def test_trl_colocate_sampling_params_take_the_bias():
    """TRL 1.16's colocated engine builds vllm.SamplingParams(**{its fields, then generation_kwargs})
    (trl/generation/vllm_generation.py `generate`): our realistic kwargs make a real SamplingParams with the bias
    and without ignore_eos."""
    vllm = pytest.importorskip("vllm")
    trl = e2e_trl.trl_config_kwargs(_worker_args("trl-vllm", LL, *REAL, "--trl-micro-batch", "32"), "cuda", "/o")
    fields = dict(n=1, repetition_penalty=1.0, temperature=trl["temperature"], top_p=trl["top_p"], top_k=trl["top_k"],
                  min_p=0.0, max_tokens=trl["max_completion_length"], logprobs=0)
    fields.update(trl["generation_kwargs"])
    params = vllm.SamplingParams(**fields)
    assert params.logit_bias == {0: 6.5} and params.ignore_eos is False and params.detokenize is False


def test_trl_generation_lengths_are_recorded_per_completion():
    # TRL's generate returns (prompt_ids, completion_ids, logprobs, logprob_token_ids), one entry a completion
    into = [[9, 9]]
    wrapped = e2e_trl.recording_lengths(lambda *a, **kw: ([[1, 2, 3], [1, 2]], [[7] * 5, [7, 0]], None, None), into)
    out = wrapped("prompts", num_generations=2)
    assert into == [[3, 5], [2, 2]] and out[1] == [[7] * 5, [7, 0]]  # replaced, not appended; the result passes
