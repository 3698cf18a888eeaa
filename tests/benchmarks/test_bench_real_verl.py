"""benchmarks/e2e_grpo.py's real-verl system, checked on a CPU without real verl: the parquet files it
writes, its reward wrapper, the Hydra override line it builds and the parsing of real verl's console
log. Running real verl itself needs the H200 (benchmarks/h200_run.sh e2e-a-real)."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import e2e_grpo  # noqa: E402
import e2e_real_verl  # noqa: E402
import e2e_reward  # noqa: E402

EXPECTED_OVERRIDES = [
    "data.train_files=/d/train.parquet",
    "data.val_files=/d/val.parquet",
    "data.train_batch_size=16",
    "data.max_prompt_length=48",
    "data.max_response_length=128",
    "data.shuffle=False",
    "data.filter_overlong_prompts=False",
    "data.truncation=error",
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=False",
    "actor_rollout_ref.model.path=/m",
    "actor_rollout_ref.model.custom_chat_template='{% for m in messages %}{{ m.content }}{% endfor %}'",
    "actor_rollout_ref.model.use_remove_padding=False",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=22528",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.top_p=1.0",
    "actor_rollout_ref.rollout.top_k=-1",
    "actor_rollout_ref.rollout.ignore_eos=True",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.rollout.enforce_eager=False",
    "actor_rollout_ref.rollout.free_cache_engine=False",
    "actor_rollout_ref.rollout.max_num_seqs=256",
    "actor_rollout_ref.rollout.max_num_batched_tokens=8192",
    "reward.custom_reward_function.path=/d/reward.py",
    "reward.custom_reward_function.name=compute_score",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=1",
    "trainer.logger=[console]",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.resume_mode=disable",
    "trainer.default_local_dir=/d/checkpoints",
    "trainer.total_epochs=1",
    "trainer.total_training_steps=4",
    "trainer.project_name=e2e_grpo",
    "trainer.experiment_name=real_verl_smollm2-135m",
]


def _args(*extra):
    # as the real-verl worker process parses its command line (one work mode)
    return e2e_grpo.parse(["--worker", "real-verl", "--device", "cpu", "--systems", "real-verl", "--prompts", "16",
                           "--group", "8", "--max-new-tokens", "128", "--steps", "3", "--warmup", "1", *extra])


def test_parquet_rows_read_back(tmp_path):
    import pandas as pd
    import pyarrow.parquet as pq

    prompts = e2e_grpo.make_prompts(5, 16)
    path = e2e_real_verl.write_real_verl_parquet(str(tmp_path / "train.parquet"), prompts, "train")
    assert pq.read_schema(path).names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    df = pd.read_parquet(path)
    assert len(df) == 5
    row = df.iloc[3]
    assert row["data_source"] == e2e_real_verl.REAL_VERL_DATA_SOURCE
    assert [dict(m) for m in row["prompt"]] == [{"role": "user", "content": prompts[3]}]
    assert row["reward_model"]["ground_truth"] == ""
    assert row["extra_info"]["index"] == 3 and row["extra_info"]["split"] == "train"


def test_reward_wrapper_matches_e2e_reward(tmp_path):
    path = e2e_real_verl.write_real_verl_reward(str(tmp_path / "reward.py"))
    spec = importlib.util.spec_from_file_location("real_verl_reward", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for text in ("aab", "", "hello world"):  # called by keyword, as verl's NaiveRewardManager does
        got = mod.compute_score(data_source="e2e_grpo", solution_str=text, ground_truth="", extra_info={})
        assert got == e2e_reward.reward([None], [text], [None])[0]
        assert got == e2e_reward.trl_reward([text])[0]


def test_override_line():
    args = _args()
    # 40-token prompts: budget 48; one micro-batch of 128 x (48 + 128) tokens
    assert e2e_real_verl.real_verl_overrides(args, "/m", "/d", "/d/reward.py", 40) == EXPECTED_OVERRIDES
    keys = [o.split("=", 1)[0].lstrip("+") for o in EXPECTED_OVERRIDES]
    assert len(keys) == len(set(keys))
    extra = _args("--real-verl-set", "actor_rollout_ref.rollout.free_cache_engine=True", "--lora-rank", "8")
    line = e2e_real_verl.real_verl_overrides(extra, "/m", "/d", "/d/reward.py", 40)
    assert line[-1] == "actor_rollout_ref.rollout.free_cache_engine=True"  # appended last: Hydra's last wins
    assert "actor_rollout_ref.model.lora_rank=8" in line and "actor_rollout_ref.model.lora_alpha=16" in line


def test_override_line_like_for_like():
    """Expert settings + the same work: appended after the shared line, before --real-verl-set (Hydra: last wins)."""
    args = _args("--work", "like-for-like", "--real-verl-set", "actor_rollout_ref.actor.strategy=fsdp")
    line = e2e_real_verl.real_verl_overrides(args, "/m", "/d", "/d/reward.py", 40)
    assert line[:len(EXPECTED_OVERRIDES)] == EXPECTED_OVERRIDES
    assert line[len(EXPECTED_OVERRIDES):] == [
        "actor_rollout_ref.rollout.calculate_log_probs=True",  # bypass_mode raises without the engine's log-probs
        "algorithm.rollout_correction.bypass_mode=True",
        "actor_rollout_ref.model.use_fused_kernels=True",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.strategy=fsdp",
    ]


def test_token_budget():
    line = e2e_real_verl.real_verl_overrides(_args("--real-verl-token-budget", "16384"), "/m", "/d", "/d/r.py", 40)
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384" in line
    assert sum(o.startswith("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=") for o in line) == 1
    assert "micro-batches of 16384 tokens" in e2e_real_verl.real_verl_notes(_args("--real-verl-token-budget", "16384"))
    # with a budget (works (b)/(c)) the engine sleeps through the update, as ours does there; without, it stays awake
    assert "actor_rollout_ref.rollout.free_cache_engine=True" in line
    assert "asleep during the update" in e2e_real_verl.real_verl_notes(_args("--real-verl-token-budget", "16384"))
    assert "no engine sleep" in e2e_real_verl.real_verl_notes(_args())
    assert "one dynamic micro-batch per step" in e2e_real_verl.real_verl_notes(_args())
    with pytest.raises(ValueError, match="less than one sequence"):  # 48 + 128 tokens
        e2e_real_verl.real_verl_overrides(_args("--real-verl-token-budget", "100"), "/m", "/d", "/d/r.py", 40)


LOG = """ray init kwargs: {'num_cpus': None}
(TaskRunnerV1 pid=4242) step:1 - training/global_step:1 - timing_s/gen:np.float64(2.5) - timing_s/old_log_prob:0.4 \
- timing_s/update_actor:1.25 - timing_s/update_weights:0.3 - timing_s/step:4.75 - perf/total_num_tokens:23000 \
- response_length/mean:np.float64(128.0) - perf/max_memory_allocated_gb:12.5
(TaskRunnerV1 pid=4242) step:2 - timing_s/gen:1.5 - timing_s/old_log_prob:0.25 - timing_s/update_actor:1.0 \
- timing_s/update_weights:0.25 - timing_s/step:3.25 - perf/total_num_tokens:23000 - response_length/mean:128.0
step:3 - timing_s/gen:1.25 - timing_s/step:3.0 - perf/total_num_tokens:23002 - response_length/mean:128.0
Training Progress: 100%|##########| 3/3
"""


def test_console_log_to_summary():
    metrics = e2e_real_verl.parse_real_verl_log(LOG)
    assert [m["timing_s/step"] for m in metrics] == [4.75, 3.25, 3.0]
    steps = e2e_real_verl.real_verl_steps(metrics)
    assert steps[0]["stages"] == {"rollout": 2.5, "old_log_prob": 0.4, "update_actor": 1.25, "update_weights": 0.3}
    assert steps[0]["completion_len"] == 128.0 and steps[0]["peak_gib"] == 12.5 and steps[0]["tokens"] == 23000
    args = _args()
    args.warmup, args.steps = 1, 2
    row = e2e_grpo.summarize("real-verl", dict(steps=steps), args)
    assert row["step_s"] == 3.125 and row["rollout_s"] == 1.375 and row["tokens_per_step"] == 23001
    assert row["update_s"] == 0.5 and row["sync_s"] == 0.125 and row["peak_gib"] == 12.5
