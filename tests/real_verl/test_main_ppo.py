"""`python3 -m verl.trainer.main_ppo` with real verl's overrides (verl/compat, docs/real_verl.md)."""

import json
import subprocess
import sys

import pytest
import yaml

from real_verl_gsm8k import write_gsm8k
from verl.compat.doc_table import doc_table, render_table
from verl.compat.real_verl import TABLE
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError
from verl.trainer.main_ppo import main

ISSUE_KEYS = [  # the GSM8K quickstart keys the issue names; each must translate (not be ignored)
    "data.train_files", "data.val_files", "data.train_batch_size", "data.max_prompt_length",
    "data.max_response_length", "actor_rollout_ref.model.path", "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.tensor_model_parallel_size", "critic.model.path", "critic.optim.lr",
    "algorithm.adv_estimator", "algorithm.kl_ctrl.kl_coef", "trainer.total_epochs", "trainer.total_training_steps",
    "trainer.save_freq", "trainer.test_freq", "trainer.default_local_dir", "trainer.logger",
    "trainer.n_gpus_per_node", "trainer.nnodes", "trainer.resume_mode",
]


@pytest.fixture
def data(tmp_path):
    return write_gsm8k(tmp_path / "train.parquet", 8), write_gsm8k(tmp_path / "test.parquet", 2, start=100)


def _quickstart(train, val, out):
    """Real verl's GSM8K PPO quickstart (docs/start/quickstart.rst), sizes cut for a tiny CPU run."""
    return [
        f"data.train_files={train}", f"data.val_files={val}", "data.train_batch_size=2",
        "data.max_prompt_length=64", "data.max_response_length=4",
        "actor_rollout_ref.model.path=tiny:gpt2", "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.name=hf",  # the quickstart's vllm is translated in test_grpo_units...
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "critic.optim.lr=1e-5", "critic.model.path=tiny:gpt2", "critic.ppo_micro_batch_size_per_gpu=4",
        "algorithm.kl_ctrl.kl_coef=0.001", "trainer.logger=['console']", "trainer.val_before_train=False",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.save_freq=2", "trainer.test_freq=2",
        "trainer.total_epochs=1", f"trainer.default_local_dir={out}", "trainer.device=cpu",
        "+logging.progress_bar=false",  # one of our own keys, Hydra's '+' form
    ]


def test_quickstart_trains_tiny_model_and_resume_auto_finds_it_done(tmp_path, capsys):
    train = write_gsm8k(tmp_path / "train.parquet", 4)
    val = write_gsm8k(tmp_path / "test.parquet", 2, start=100)
    out = tmp_path / "out"
    assert main(_quickstart(train, val, out)) == 0
    err = capsys.readouterr().err
    for ignored in ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size_per_gpu",
                    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "trainer.val_before_train"):
        assert any(line.startswith(f"main_ppo: ignored {ignored}=") for line in err.splitlines()), ignored
    assert "training.total_steps=2: trainer.total_epochs=1 x (4 prompts // 2 per step)" in err

    cfg = yaml.safe_load((out / "config.yaml").read_text())
    t, a = cfg["training"], cfg["algorithm"]
    assert (t["batch_size"], t["mini_batch_size"], t["micro_batch_size"], t["total_steps"]) == (2, 1, 1, 2)
    assert (t["lr"], t["critic_lr"], t["weight_decay"], t["val_every"]) == (1e-6, 1e-5, 0.01, 2)
    assert (a["name"], a["adv_estimator"], a["kl_coef"], a["use_kl_in_reward"], a["lam"]) == ("ppo", "gae", 0.001,
                                                                                                False, 1.0)
    assert (a["clip_ratio_c"], a["cliprange_value"]) == (3.0, 0.5)  # real verl's defaults, not ours
    assert cfg["rollout"]["max_new_tokens"] == 4 and cfg["critic"]["name"] is None  # critic = the actor's model
    assert cfg["reward_fn"]["type"] == "by_data_source"  # openai/gsm8k rows: real verl's GSM8K rule, exactly
    assert cfg["checkpoint"]["save_full_every"] == 2 and cfg["checkpoint"]["resume"] == "auto"
    assert cfg["logging"]["backends"] == ["console", "jsonl"] and cfg["device"] == "cpu"

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "reward/by_data_source" in r]
    assert [r["step"] for r in train_rows] == [1, 2]
    assert [r["step"] for r in rows if "val/openai/gsm8k/acc@1" in r] == [0, 2]  # test_freq=2
    assert (out / "checkpoints" / "step_000002").is_dir()  # save_freq=2: a resumable checkpoint

    # trainer.resume_mode defaults to auto, as in real verl: the same line finds the run finished
    assert main(_quickstart(train, val, out)) == 0
    assert "already finished" in capsys.readouterr().out
    assert len((out / "metrics.jsonl").read_text().splitlines()) == len(rows)


def test_grpo_units_epochs_and_vllm(data):
    train, val = data
    tr = translate([f"data.train_files={train}", f"data.val_files={val}", "data.train_batch_size=4",
                    "actor_rollout_ref.model.path=tiny:gpt2", "algorithm.adv_estimator=grpo",
                    "actor_rollout_ref.rollout.n=5", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5", "actor_rollout_ref.actor.use_kl_loss=True",
                    "actor_rollout_ref.actor.kl_loss_coef=0.002", "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
                    "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.rollout.name=vllm",
                    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.5", "trainer.total_epochs=3",
                    "trainer.logger=['console','wandb']"])
    cfg = load_translated(tr)
    # ppo_mini_batch_size counts prompts in real verl: 2 prompts x 5 samples = 10 sequences here
    assert (cfg.training.batch_size, cfg.rollout.n, cfg.training.mini_batch_size) == (4, 5, 10)
    assert cfg.training.micro_batch_size == 5
    assert cfg.training.total_steps == 6  # 3 epochs x (8 prompts // 4 per step)
    assert cfg.training.warmup_steps == 3  # int(0.5 x 6)
    a = cfg.algorithm
    assert (a.name, a.adv_estimator, a.use_kl_loss, a.kl_loss_coef, a.kl_estimator) == ("grpo", "grpo", True, 0.002,
                                                                                         "k3")
    assert (a.use_kl_in_reward, a.entropy_coeff, a.loss_agg_mode) == (False, 0.0, "token-mean")
    assert cfg.rollout.name == "vllm" and cfg.logging.backends == ["console", "wandb", "jsonl"]


def test_our_keys_mix_in_and_disagreements_are_refused(data):
    train, _ = data
    base = [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    cfg = load_translated(translate(base + ["rollout.n=3", "data.answer_key=solution", "trainer.total_training_steps=2"]))
    assert cfg.training.mini_batch_size == 6  # our rollout.n is read back into real verl's n
    assert cfg.data.answer_key == "solution" and cfg.training.total_steps == 2
    fresh = load_translated(translate(base + ["trainer.resume_mode=disable"]))  # start over, earlier run moved aside
    assert (fresh.checkpoint.resume, fresh.checkpoint.overwrite) == ("none", True)
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.rollout\.n=2 and rollout\.n=3 both set rollout\.n"):
        translate(base + ["rollout.n=3", "actor_rollout_ref.rollout.n=2"])
    with pytest.raises(ConfigError, match=r"critic\.ppo_epochs=2 differs from actor_rollout_ref\.actor\.ppo_epochs=1"):
        translate(base + ["critic.ppo_epochs=2"])
    # an error of our own checks names the real key behind the value
    with pytest.raises(ConfigError, match=r"training\.micro_batch_size <- actor_rollout_ref\.actor\.ppo_micro_batch_"
                                          r"size_per_gpu=3"):
        load_translated(translate(base + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"]))


def test_calculate_log_probs_asks_the_engine_every_step(data):
    # real verl's rollout.calculate_log_probs: true -> the engine's log-probs (and the stale-weights check)
    # every step; false, its default, leaves ours: every 10th step
    train, _ = data
    base = [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    assert load_translated(translate(base)).rollout.logprob_check_every == 10
    on = load_translated(translate(base + ["actor_rollout_ref.rollout.calculate_log_probs=True"]))
    assert on.rollout.logprob_check_every == 1
    off = load_translated(translate(base + ["actor_rollout_ref.rollout.calculate_log_probs=False"]))
    assert off.rollout.logprob_check_every == 10


def test_filter_overlong_prompts_counts_steps_after_filtering(tmp_path, tiny_gpt2):
    train = write_gsm8k(tmp_path / "train.parquet", 8, long_from=6)  # rows 6, 7: ~400 tokens
    tr = translate([f"data.train_files={train}", f"actor_rollout_ref.model.path={tiny_gpt2}",
                    "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                    "data.max_prompt_length=64", "data.filter_overlong_prompts=True", "trainer.total_epochs=2"])
    assert tr.values["data.truncation"] == "filter"
    assert tr.values["training.total_steps"] == 6  # 2 epochs x (6 kept prompts // 2), not 2 x (8 // 2)


def test_reward_follows_data_source_or_our_reward_fn(tmp_path):
    flat = tmp_path / "mydata.jsonl"  # flat rows name no data_source: it is the file name
    flat.write_text("".join(json.dumps({"prompt": f"Say {i}", "answer": str(i)}) + "\n" for i in range(4)))
    base = [f"data.train_files={flat}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    with pytest.raises(ConfigError, match=r"data_source 'mydata' \(.*mydata.jsonl line 1\).*custom_reward_function.path.*reward_fn.type"):
        translate(base)
    tr = translate(base + ["reward_fn.type=number"])  # our own reward: no data_source lookup
    assert load_translated(tr).reward_fn.type == "number"


@pytest.mark.parametrize("arg, named", [
    ("actor_rollout_ref.actor.ppo_mini_batch_sise=2", "actor_rollout_ref.actor.ppo_mini_batch_sise"),
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "actor_rollout_ref.actor.megatron"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=clip-cov", "actor_rollout_ref.actor.policy_loss.loss_mode"),
    ("reward_model.enable=True", "reward_model.enable"),
    ("actor_rollout_ref.rollout.name=trtllm", "real verl's actor_rollout_ref.rollout.name=trtllm is not supported"),
    ("custom_reward_function.path=missing_reward.py", "custom_reward_function.path: file 'missing_reward.py' not found"),
    ("reward.reward_manager.name=limited", "real verl's reward.reward_manager.name=limited is not supported"),
    ("distillation.enabled=True", "distillation.teacher_models.teacher_model.model_path: distillation.enabled=True needs the teacher's model"),
    ("trainer.resume_mode=resume_path", "trainer.resume_from_path"),
    ("model_engine=automodel", "real verl's model_engine=automodel is not supported"),
    ("actor_rollout_ref.actor.optim.lr_min=0.1", "read by its VeOmni engine only: give model_engine=veomni"),
    ("actor_rollout_ref.actor.optim.lr_decay_style=cosine", "read by its Megatron engine only"),
])
def test_unsupported_key_or_value_is_one_line_exit_2(data, tmp_path, capsys, arg, named):
    train, val = data
    rc = main(_quickstart(train, val, tmp_path / "out") + [arg])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and named in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_module_entry_point_and_debug(data, tmp_path, capsys):
    train, val = data
    args = [sys.executable, "-m", "verl.trainer.main_ppo", *_quickstart(train, val, tmp_path / "out"),
            "trainer.val_only=True"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "trainer.val_only" in proc.stderr
    assert main(args[3:] + ["--debug"]) == 2  # --debug: the traceback, then the same line and exit code
    err = capsys.readouterr().err
    assert "Traceback" in err and "ConfigError" in err and err.strip().splitlines()[-1].startswith(
        "error: real verl's trainer.val_only=True")


def test_doc_table_is_the_code_table():
    assert doc_table() == render_table(), "run: python -m verl.compat.doc_table --write"
    for key in ISSUE_KEYS:
        assert key in TABLE and not TABLE[key].ignored, key


def test_main_ppo_bad_input_is_one_clear_line(data, tmp_path, capsys):
    """An unknown section's error carries no tag about an unrelated key; a non-integer step count is
    one line naming it; a --config-path YAML with a key given twice is refused, as `verl train` (and
    OmegaConf) refuse it."""
    train, _ = data
    base = [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.device=cpu"]
    with pytest.raises(ConfigError) as err:
        load_translated(translate(base + ["foo.bar=1", "trainer.total_training_steps=1"]))
    assert str(err.value).startswith("unknown config key 'foo'") and "<-" not in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match=r"^trainer\.total_training_steps: expected an integer, got 'abc'$"):
        load_translated(translate(base + ["trainer.total_training_steps=abc"]))
    (tmp_path / "dup.yaml").write_text("trainer:\n  total_epochs: 1\n  total_epochs: 2\n")
    code = main([f"--config-path={tmp_path}", "--config-name=dup", *base])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and last == (f"error: {tmp_path / 'dup.yaml'}: key 'total_epochs' appears twice in one section "
                                  "(lines 2 and 3); keep one of them"), last
