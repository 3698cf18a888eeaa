"""Real verl's own example scripts and its reward / config-file features through our main_ppo
(tools/real_verl_scripts/harness.py, verl/compat/real_rewards.py, verl/compat/config_file.py)."""

import dataclasses
import json
import os

import pytest
import yaml

from tools.real_verl_scripts.harness import (TRAINS, VISION_FAMILY, doc_rows, is_vision, load, outcome,
                                            provide_files, run_all, write_rows)
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError
from verl.trainer.main_ppo import main

VISION_MODEL = f"tiny:{VISION_FAMILY}"  # the stand-in of real verl's vision-language models (verl/models/tiny_vl.py)

# A representative set, trained for one step each: PPO with a critic (the canonical script), GRPO on
# real verl's default GSM8K + MATH list (per-data_source rewards), LoRA, a reward model, the DAPO
# reward manager with GSPO, an SGLang script, one with --config-path/--config-name, a custom
# compute_score and sampled validation, REINFORCE++ and RLOO, a Megatron one (ppo_megatron_trainer: PPO
# with a critic, parallel sizes, dist checkpointing), and a vision-language script (geo3k with
# LoRA and exclude_modules, on the tiny Qwen2.5-VL; tests/real_verl/test_main_ppo_vl.py trains the other geo3k ones).
REPRESENTATIVE = [
    "examples/grpo_trainer/run_qwen2_5_vl-7b_lora.sh",
    "examples/ppo_trainer/run_deepseek7b_llm.sh",
    "examples/grpo_trainer/run_qwen2-7b_math.sh",
    "examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh",
    "examples/ppo_trainer/run_qwen2-7b_rm.sh",
    "examples/gspo_trainer/test_gspo_3b_math.sh",
    "examples/grpo_trainer/run_qwen2-32b_sglang_fsdp_npu.sh",
    "examples/ppo_trainer/run_qwen2-7b_sglang_seq_balance.sh",
    "examples/reinforce_plus_plus_trainer/run_qwen2-7b_math_rf.sh",
    "examples/rloo_trainer/run_qwen2-7b.sh",
    "examples/ppo_trainer/run_moonlight16b_a3b_gsm8k_megatron.sh",  # Megatron's config, PPO with a critic
]


def test_every_script_is_translated_as_the_doc_table_says():
    doc = doc_rows()
    found = run_all(train=False)  # translation and every check, no training: about 4 s for all
    assert set(doc) == set(found) == {s.name for s in load().scripts}
    wrong = {name: (doc[name], found[name]) for name in doc if doc[name] != found[name]}
    assert not wrong, "run: python -m tools.real_verl_scripts.harness --write"
    for name, line in doc.items():  # a refusal is main_ppo's one line for bad input, never a crash
        assert line == TRAINS or "\n" not in line and "--debug for the traceback" not in line, (name, line)
    # real verl's Megatron scripts (--config-name=ppo_megatron_trainer) train on FSDP2 here, or are refused for
    # a named setting of their own (LoRA through Megatron's bridge, MoE routing replay, ...), never for the config
    megatron = [s.name for s in load().scripts if any("ppo_megatron_trainer" in a for a in s.args)]
    assert len(megatron) == 30 and sum(doc[n] == TRAINS for n in megatron) >= 24
    assert not [n for n in megatron if "--config-name" in doc[n] or "Megatron config" in doc[n]]
    # the vision-language scripts (data.image_key, or a -VL- model: the multi-turn geo3k ones) run on the tiny VL
    # model: all train, MiniCPM-o's with its own dataset class (data.custom_cls: a stand-in of
    # recipe/minicpmo/rl_dataset.py)
    vision = [s.name for s in load().scripts if is_vision(s)]
    assert len(vision) == 17 and [n for n in vision if doc[n] != TRAINS] == []


@pytest.mark.parametrize("name", ["examples/rollout_correction/run_with_rollout_corr.sh",
                                  "examples/rollout_correction/run_with_rollout_corr_multi_rs.sh"])
def test_rollout_correction_scripts_train_with_two_samples(name, tmp_path, tiny_gpt2):
    # the table refuses them for leaving rollout.n at real verl's 1 (rloo / grpo compare samples here); with
    # n = 2 their rollout correction (sequence IS + batch norm + bypass reinforce; token IS + token_k1,seq_max_k2
    # rejection + bypass ppo_clip) trains a step
    examples = load()
    script = next(s for s in examples.scripts if s.name == name)
    script = dataclasses.replace(script, args=[*script.args, "actor_rollout_ref.rollout.n=2"])
    provide_files(examples, str(tmp_path / "real_verl"))
    assert outcome(script, str(tmp_path), tiny_gpt2, train=True, vision_model=VISION_MODEL) == TRAINS


@pytest.mark.parametrize("name, extra", [
    ("examples/grpo_trainer/run_minicpmo2_6.sh", []),  # data.custom_cls: MiniCPM-o's own dataset class
    # data.custom_cls (retool's CustomRLHFDataset) and data.sampler (real verl's test sampler, pkg://tests...):
    # past those keys the scripts stop at multi_turn.enable (the table); without it they train a step
    ("examples/sglang_multiturn/run_qwen3_4b_dapo_multiturn.sh", ["actor_rollout_ref.rollout.multi_turn.enable=False"]),
    ("examples/sglang_multiturn/run_qwen0.5b_gsm8k_multiturn_curriculum.sh",
     ["actor_rollout_ref.rollout.multi_turn.enable=False"]),
])
def test_dataset_class_and_sampler_scripts_train_a_step(name, extra, tmp_path, tiny_gpt2):
    examples = load()
    script = next(s for s in examples.scripts if s.name == name)
    script = dataclasses.replace(script, args=[*script.args, *extra])
    provide_files(examples, str(tmp_path / "real_verl"))
    assert outcome(script, str(tmp_path), tiny_gpt2, train=True, vision_model=VISION_MODEL) == TRAINS


def test_minicpmo_dataset_class_rows_carry_their_images(tmp_path):
    """MiniCPM-o's class pops the prompt and the images (into multi_modal_data): its rows are still the
    geo3k rows, with raw_prompt's messages and one image each."""
    from verl.config import DataConfig, build_section
    from verl.data.custom_dataset import dataset_rows
    from verl.models.loading import load_tokenizer
    from verl.models.tiny_vl import tiny_vl_model_path

    provide_files(load(), str(tmp_path / "real_verl"))
    train = write_rows(str(tmp_path / "geo.parquet"), "geo3k")
    code = tmp_path / "real_verl" / "recipe" / "minicpmo" / "rl_dataset.py"
    cfg = build_section(DataConfig, {"dataset_class": f"{code}:RLHFDataset", "train_files": [train]}, "data")
    rows = dataset_rows(cfg, [train], load_tokenizer(tiny_vl_model_path(VISION_FAMILY)))
    assert [r.ground_truth for r in rows] == ["3", "4"] and all(len(r.images) == 1 for r in rows)
    assert rows[0].prompt[0]["content"].startswith("<image>Find x. The side is 3.")


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_representative_script_trains_a_step(name, tmp_path, tiny_gpt2):
    examples = load()
    script = next(s for s in examples.scripts if s.name == name)
    provide_files(examples, str(tmp_path / "real_verl"))
    assert doc_rows()[name] == TRAINS
    assert outcome(script, str(tmp_path), tiny_gpt2, train=True, vision_model=VISION_MODEL) == TRAINS


def test_script_arguments_keep_the_original_key_set(tmp_path, tiny_gpt2):
    from tools.real_verl_scripts.harness import tiny_args

    script = next(s for s in load().scripts if s.name == "examples/grpo_trainer/run_qwen2-7b_math.sh")
    args = tiny_args(script, str(tmp_path), tiny_gpt2, str(tmp_path / "real_verl"))
    keys = [a.split("=", 1)[0] for a in args]
    original = [a.split("=", 1)[0] for a in script.args]
    assert keys[:len(original)] == original  # same keys in the same order, then the added steps/device keys
    values = dict(a.split("=", 1) for a in args)
    train = yaml.safe_load(values["data.train_files"])
    assert len(train) == 2 and train[0].endswith("gsm8k.parquet") and train[1].endswith("math.parquet")
    assert (values["actor_rollout_ref.rollout.n"], values["data.train_batch_size"]) == ("2", "2")  # was 5, 1024
    assert values["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"  # untouched


# ---------------------------------------------------------------------------- rewards


def _base(train, extra=()):
    return [f"data.train_files={train}", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "data.max_prompt_length=64",
            "data.max_response_length=4", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
            "trainer.total_training_steps=1", "trainer.logger=['console']", "trainer.device=cpu", *extra]


REWARD_FILE = '''import json, os
def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(json.dumps([data_source, solution_str, ground_truth, extra_info, scale]) + "\\n")
    return {"score": scale * len(solution_str), "chars": len(solution_str)}

def batched(data_sources, solution_strs, ground_truths, extra_infos):
    return [float(g) for g in ground_truths]
'''


@pytest.mark.parametrize("prefix", ["custom_reward_function", "reward.custom_reward_function"])
def test_custom_compute_score_is_called_per_sample(prefix, tmp_path, tiny_gpt2, monkeypatch):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    (tmp_path / "my_reward.py").write_text(REWARD_FILE)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("CALLS", str(calls))
    out = tmp_path / "out"
    rc = main(_base(train, [f"actor_rollout_ref.model.path={tiny_gpt2}", f"{prefix}.path={tmp_path}/my_reward.py",
                            f"{prefix}.name=compute_score", f"+{prefix}.reward_kwargs.scale=0.5",
                            f"trainer.default_local_dir={out}"]))
    assert rc == 0
    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(rows) == 4  # 2 prompts x rollout.n 2, one call each
    for data_source, solution, truth, extra, scale in rows:
        assert data_source == "openai/gsm8k" and truth in ("2", "3") and scale == 0.5
        assert extra["split"] == "train" and extra["index"] in (0, 1) and isinstance(solution, str)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
               if '"reward/mean"' in line][-1]
    # the reward is 0.5 x the characters of the decoded response; "chars" is its extra entry
    assert metrics["reward/python"] == pytest.approx(sum(0.5 * len(r[1]) for r in rows) / 4)
    assert metrics["reward/python/chars"] == pytest.approx(sum(len(r[1]) for r in rows) / 4)


def test_batched_compute_score_and_the_two_spellings(tmp_path):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    (tmp_path / "my_reward.py").write_text(REWARD_FILE)
    cfg = load_translated(translate(_base(train, ["actor_rollout_ref.model.path=tiny:gpt2",
                                                  f"reward.custom_reward_function.path={tmp_path}/my_reward.py",
                                                  "reward.custom_reward_function.name=batched",
                                                  "reward.reward_manager.name=batch"])))
    from verl.rewards.manager import RewardManager

    scores, _ = RewardManager(cfg.reward_fn)._score_lists(["p", "p"], ["a", "b"], [
        {"ground_truth": "2", "data_source": "openai/gsm8k"}, {"ground_truth": "7", "data_source": "x"}])[:2]
    assert scores == [2.0, 7.0]  # float(ground_truth), one call for the batch
    with pytest.raises(ConfigError, match=r"custom_reward_function.* both set reward_fn.function"):
        translate(_base(train, ["actor_rollout_ref.model.path=tiny:gpt2",
                                f"custom_reward_function.path={tmp_path}/my_reward.py",
                                f"reward.custom_reward_function.path={tmp_path}/my_reward.py",
                                "reward.custom_reward_function.name=batched"]))


def test_mixed_gsm8k_and_math_data_is_scored_per_data_source(tmp_path, tiny_gpt2):
    gsm8k = write_rows(str(tmp_path / "gsm8k.parquet"), "gsm8k")
    math = write_rows(str(tmp_path / "math.parquet"), "math")
    out = tmp_path / "out"
    tr = translate(_base(f"['{gsm8k}','{math}']", [f"actor_rollout_ref.model.path={tiny_gpt2}",
                                                   f"trainer.default_local_dir={out}"]))
    assert tr.values["reward_fn.type"] == "by_data_source"
    assert any("by_data_source" in n and "DigitalLearningGmbH/MATH-lighteval" in n for n in tr.notes)
    from verl.rewards.manager import RewardManager

    manager = RewardManager(load_translated(tr).reward_fn)
    # gsm8k rows: only '#### n' counts (real verl's strict scorer); math rows: the last \boxed{}
    scores, metrics = manager._score_lists(["p"] * 4, ["so #### 2", "2", "\\boxed{3}", "#### 3"], [
        {"ground_truth": "2", "data_source": "openai/gsm8k"}, {"ground_truth": "2", "data_source": "openai/gsm8k"},
        {"ground_truth": "3", "data_source": "DigitalLearningGmbH/MATH-lighteval"},
        {"ground_truth": "3", "data_source": "DigitalLearningGmbH/MATH-lighteval"}])[:2]
    assert scores == [1.0, 0.0, 1.0, 0.0]
    assert metrics["reward/openai/gsm8k/mean"] == 0.5 and metrics["reward/DigitalLearningGmbH/MATH-lighteval/mean"] == 0.5
    assert main(_base(f"['{gsm8k}','{math}']", [f"actor_rollout_ref.model.path={tiny_gpt2}", "data.train_batch_size=4",
                                                f"trainer.default_local_dir={out}"])) == 0  # all 4 rows
    last = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if '"reward/mean"' in line][-1]
    assert "reward/openai/gsm8k/mean" in last and "reward/DigitalLearningGmbH/MATH-lighteval/mean" in last


def test_reward_model_and_dapo_manager_map(tmp_path, tiny_gpt2):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    base = _base(train, ["actor_rollout_ref.model.path=tiny:gpt2"])
    for rm in (["reward_model.enable=True", f"reward_model.model.path={tiny_gpt2}",
                "reward_model.micro_batch_size_per_gpu=8"],
               ["reward.reward_model.enable=True", f"reward.reward_model.model_path={tiny_gpt2}",
                "reward.reward_model.rollout.tensor_model_parallel_size=2"]):
        cfg = load_translated(translate(base + rm))
        assert (cfg.reward_fn.type, cfg.reward_fn.model_name) == ("huggingface_rm", tiny_gpt2)
    cfg = load_translated(translate(base + ["reward_model.reward_manager=dapo",
                                            "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
                                            "+reward_model.reward_kwargs.overlong_buffer_cfg.len=2",
                                            "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
                                            "+reward_model.reward_kwargs.max_resp_len=4"]))
    o = cfg.algorithm.overlong_penalty
    assert (o.enable, o.buffer_len, o.penalty_factor) == (True, 2, 0.5)
    with pytest.raises(ConfigError, match=r"overlong_buffer_cfg.len=5 is longer than data.max_response_length=4"):
        translate(base + ["reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.len=5",
                          "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True"])
    with pytest.raises(ConfigError, match="max_resp_len=8 differs from data.max_response_length=4"):
        translate(base + ["reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.max_resp_len=8",
                          "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True"])


# ---------------------------------------------------------------------------- keys and messages


def test_keys_of_current_real_verl_map_or_are_logged(tmp_path):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    base = [a for a in _base(train, ["actor_rollout_ref.model.path=tiny:gpt2"]) if a != "trainer.device=cpu"]
    R = "actor_rollout_ref.rollout"
    tr = translate(base + [f"{R}.checkpoint_engine.update_weights_bucket_megabytes=512", f"{R}.enable_prefix_caching=True",
                           f"{R}.data_parallel_size=1", f"{R}.expert_parallel_size=1", "critic.fsdp.param_offload=True",
                           "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction=1.0",
                           f"{R}.val_kwargs.do_sample=True", f"{R}.val_kwargs.n=1",
                           f"{R}.val_kwargs.temperature=0.6", f"{R}.val_kwargs.top_p=0.95"])
    cfg = load_translated(tr)
    assert cfg.distributed.weight_bucket_mb == 512
    assert translate(base + [f"{R}.name=sglang"]).values["rollout.name"] == "sglang"  # loads on a GPU only
    d = cfg.data
    assert (d.val_n, d.val_do_sample, d.val_temperature, d.val_top_p, d.val_top_k) == (1, True, 0.6, 0.95, 0)
    at_default = translate(base + ["actor_rollout_ref.actor.calculate_entropy=False"])  # real verl's default
    assert "ignored actor_rollout_ref.actor.calculate_entropy=False: real verl's default, which changes nothing" in (
        at_default.notes)
    with pytest.raises(ConfigError, match=r"calculate_entropy=True is not supported: .*only its default false"):
        translate(base + ["actor_rollout_ref.actor.calculate_entropy=True"])
    for key in (f"{R}.enable_prefix_caching", f"{R}.data_parallel_size", f"{R}.expert_parallel_size",
                "critic.fsdp.param_offload"):
        assert any(n.startswith(f"ignored {key}=") for n in tr.notes), key
    with pytest.raises(ConfigError, match=r"real verl's actor_rollout_ref.actor.optim.override_optimizer_config.eps="
                                          r"1e-05 is not supported"):
        translate(base + ["+actor_rollout_ref.actor.optim.override_optimizer_config.eps=1e-5"])


@pytest.mark.parametrize("arg, hint", [
    ("actor_rollout_ref.actor.ppo_mini_batch_sise=2", "did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'"),
    ("actor_rollout_ref.actor.engine.tp=2", None),  # was: grad_clip
    ("actor_rollout_ref.model.lora_dropout=0.1", None),  # not lora_alpha (lora_adapter_path was: it maps now)
    ("actor_rollout_ref.model_engine=dp", None),  # was: hybrid_engine
    ("reward.foo=1", None),
])
def test_unknown_real_keys_say_so_and_suggest_only_close_keys(arg, hint, tmp_path):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    with pytest.raises(ConfigError) as err:
        translate(_base(train, ["actor_rollout_ref.model.path=tiny:gpt2", arg]))
    message = str(err.value)
    assert message.startswith(f"real verl's {arg.split('=')[0]} is not supported: it has no equivalent here")
    assert "ppo_trainer config has no such key either" in message  # none of these is a key of real verl 0.9
    assert (hint in message) if hint else "did you mean" not in message


# ---------------------------------------------------------------------------- --config-path / --config-name

# The structure of real verl's generated ppo_trainer.yaml (verl/trainer/config/_generated_ppo_trainer.yaml),
# trimmed: its interpolations, `???`, _target_ entries and keys that have no equivalent here included.
GENERATED = """
actor_rollout_ref:
  actor:
    _target_: verl.workers.config.FSDPActorConfig
    strategy: fsdp
    ppo_mini_batch_size: 256
    ppo_micro_batch_size_per_gpu: null
    use_dynamic_bsz: false
    clip_ratio: 0.2
    use_kl_loss: false
    kl_loss_coef: 0.001
    optim: {lr: 1.0e-06, weight_decay: 0.01, lr_warmup_steps_ratio: 0.0}
    use_remove_padding: ${oc.select:actor_rollout_ref.model.use_remove_padding,false}
    fsdp_config: {param_offload: false, fsdp_size: -1}
    checkpoint: {save_contents: [model, optimizer], load_contents: "${.save_contents}"}
  model: {path: ~/models/deepseek-llm-7b-chat, use_remove_padding: true, use_fused_kernels: false}
  rollout:
    name: ???
    n: 1
    temperature: 1.0
    response_length: ${oc.select:data.max_response_length,512}
    scheduling_policy: fcfs
    an_older_knob: 3
    checkpoint_engine: {backend: naive, update_weights_bucket_megabytes: 2048}
    val_kwargs: {do_sample: false, n: 1}
data: {train_files: ~/data/rlhf/gsm8k/train.parquet, train_batch_size: 1024, max_prompt_length: 512,
       max_response_length: 512}
critic:
  model: {path: ~/models/deepseek-llm-7b-chat}
  ppo_mini_batch_size: ${actor_rollout_ref.actor.ppo_mini_batch_size}
  optim: {lr: 1.0e-05}
  fsdp: {param_offload: false}
reward:
  custom_reward_function: {path: null, name: compute_score}
  reward_manager: {name: naive, source: register}
  reward_model: {enable: false, model_path: null}
algorithm: {adv_estimator: gae, gamma: 1.0, lam: 1.0, kl_ctrl: {kl_coef: 0.001}}
distillation: {enabled: false}
transfer_queue: {enable: false}
trainer: {total_epochs: 30, n_gpus_per_node: 8, nnodes: 1, logger: [console, wandb], project_name: verl_examples,
          device: cuda}
"""


def test_config_name_reads_a_real_verl_yaml_and_overrides_win(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "ppo_trainer.yaml").write_text(GENERATED)
    (tmp_path / "cfg" / "my_grpo.yaml").write_text(
        "defaults: [ppo_trainer, _self_]\nalgorithm: {adv_estimator: grpo}\nactor_rollout_ref: {rollout: {n: 4}}\n")
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k", n=4)
    tr = translate([f"--config-path={tmp_path}/cfg", "--config-name=my_grpo", f"data.train_files={train}",
                    "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=1", "trainer.total_epochs=2"])
    cfg = load_translated(tr)
    # the file's values that are real verl's defaults where the table deliberately differs count as not given:
    # one device (not n_gpus_per_node 8), the actor's model for the critic, the console logger, device auto
    assert (cfg.distributed.backend, cfg.critic.name, cfg.device) == ("none", None, "auto")
    assert cfg.logging.backends == ["console", "jsonl"]
    # from the files: grpo and n=4 (my_grpo), packing via ${oc.select:...} and the bucket size (ppo_trainer)
    assert (cfg.algorithm.adv_estimator, cfg.rollout.n, cfg.training.use_packed_samples) == ("grpo", 4, True)
    assert cfg.distributed.weight_bucket_mb == 2048
    # from the command line, over the files: 1 prompt x 4 samples per mini-batch; 2 epochs x (4 // 2) steps
    assert (cfg.training.mini_batch_size, cfg.training.total_steps, cfg.training.batch_size) == (4, 4, 2)
    assert cfg.rollout.max_new_tokens == 512  # response_length: ${oc.select:data.max_response_length,512}
    note = next(n for n in tr.notes if n.startswith("read "))
    # scheduling_policy is at real verl's default (no effect there either); a key real verl has not: named
    assert "my_grpo.yaml" in note and "at (or derived like) real verl's defaults" in note
    assert "does not have: actor_rollout_ref.rollout.an_older_knob" in note and "scheduling_policy" not in note
    assert not any(n.startswith("ignored actor_rollout_ref.actor.fsdp_config") for n in tr.notes)
    # the older spelling typed over the file's current one (reward.reward_manager.name: naive) is the one in force
    dapo = load_translated(translate([f"--config-path={tmp_path}/cfg", "--config-name=my_grpo",
                                      f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2",
                                      "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                                      "trainer.n_gpus_per_node=1", "reward_model.reward_manager=dapo",
                                      "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
                                      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=16"]))
    assert (dapo.algorithm.overlong_penalty.enable, dapo.algorithm.overlong_penalty.buffer_len) == (True, 16)
    # real verl's packaged Megatron config is ppo_trainer with model_engine=megatron: Megatron's optimizer here
    meg = translate(["--config-path=config", "--config-name=ppo_megatron_trainer", f"data.train_files={train}",
                     "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
                     "actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    assert meg.values["training.weight_decay_1d"] is False and meg.values["training.lr_scheduler"] == "constant"
    assert not any(n.startswith("read ") for n in meg.notes) and any(n.startswith("model_engine=megatron") for n in
                                                                     meg.notes)
    with pytest.raises(ConfigError, match=r"--config-name=nope: no file .*nope.yaml"):
        translate([f"--config-path={tmp_path}/cfg", "--config-name=nope"])
    (tmp_path / "cfg" / "bad.yaml").write_text("defaults: [ppo_trainer]\nactor_rollout_ref: {actor: {strategy: megatron}}\n")
    with pytest.raises(ConfigError, match=r"strategy=megatron is not supported.*\[.*set in .*bad.yaml\]"):
        translate([f"--config-path={tmp_path}/cfg", "--config-name=bad", f"data.train_files={train}",
                   "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
                   "actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    (tmp_path / "cfg" / "odd.yaml").write_text("defaults: [ppo_trainer]\nactor_rollout_ref: {rollout: "
                                              "{scheduling_policy: priority}}\n")
    with pytest.raises(ConfigError, match=r"real verl's actor_rollout_ref.rollout.scheduling_policy=priority \(in "
                                          r".*odd.yaml\) is not supported: .*only its default \"fcfs\""):
        translate([f"--config-path={tmp_path}/cfg", "--config-name=odd", f"data.train_files={train}"])


def test_critic_warmup_rollout_correction_and_gen_batch(tmp_path):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k", n=8)
    base = [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.total_epochs=5"]  # 5 x (8 // 2) = 20 steps
    cfg = load_translated(translate(base + ["actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1",
                                            "critic.optim.lr_warmup_steps_ratio=0.05"]))
    assert (cfg.training.warmup_steps, cfg.training.critic_warmup_steps) == (2, 1)  # int(0.1 x 20), int(0.05 x 20)
    from verl.workers.optim import build_scheduler
    import torch

    def lrs(critic: bool) -> list:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler, out = build_scheduler(opt, cfg.training, critic=critic), []
        for _ in range(3):
            out.append(scheduler.get_last_lr()[0])
            opt.step()
            scheduler.step()
        return out

    # a linear warm-up over w steps runs step s at s / w, as real verl's: actor w = 2 -> 0, 1/2, 1; critic w = 1
    assert lrs(critic=False) == [0.0, 0.5, 1.0]
    assert lrs(critic=True) == [0.0, 1.0, 1.0]
    rc = "algorithm.rollout_correction"
    cfg = load_translated(translate(base + [f"{rc}.rollout_is=token", f"{rc}.rollout_is_threshold=3.0"]))
    assert (cfg.algorithm.rollout_correction.rollout_is, cfg.algorithm.rollout_correction.rollout_is_threshold,
            cfg.rollout.tis_cap) == ("token", "3.0", 0.0)
    cfg = load_translated(translate(base + [f"{rc}.rollout_is=sequence", f"{rc}.rollout_rs=seq_mean_k1",
                                            f"{rc}.rollout_rs_threshold=0.999_1.001", f"{rc}.bypass_mode=true",
                                            f"{rc}.loss_type=reinforce"]))
    got = cfg.algorithm.rollout_correction
    assert (got.rollout_is, got.rollout_rs, got.rollout_rs_threshold, got.bypass_mode, cfg.algorithm.policy_loss) == (
        "sequence", "seq_mean_k1", "0.999_1.001", True, "reinforce")
    with pytest.raises(ConfigError, match=r"calculate_log_probs=False\); real verl raises there too"):
        translate(base + [f"{rc}.bypass_mode=true", "actor_rollout_ref.rollout.calculate_log_probs=False"])
    # decoupled without the engine's log-probs: real verl skips the correction, and so does the translation
    cfg = load_translated(translate(base + [f"{rc}.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=False"]))
    assert cfg.algorithm.rollout_correction.rollout_is is None
    with pytest.raises(ConfigError, match=r"real verl's data.gen_batch_size=6 is not supported.*dynamic_sampling"):
        translate(base + ["+data.gen_batch_size=6"])
    assert load_translated(translate(base + ["+data.gen_batch_size=2"])).training.batch_size == 2


def test_sampled_validation_with_one_answer(tmp_path, tiny_gpt2):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    val = write_rows(str(tmp_path / "val.parquet"), "gsm8k", start=100)
    out = tmp_path / "out"
    R = "actor_rollout_ref.rollout.val_kwargs"
    assert main(_base(train, [f"actor_rollout_ref.model.path={tiny_gpt2}", f"data.val_files={val}",
                              "trainer.test_freq=1", f"{R}.do_sample=True", f"{R}.n=1", f"{R}.temperature=0.7",
                              f"trainer.default_local_dir={out}"])) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    val_rows = [r for r in rows if "val/openai/gsm8k/mean@1" in r]
    assert val_rows and all("val/openai/gsm8k/mean@1_sampled" in r and "val/openai/gsm8k/pass@1_sampled" in r
                            for r in val_rows)
    assert yaml.safe_load((out / "config.yaml").read_text())["data"]["val_temperature"] == 0.7


def test_compute_score_signature_real_verl_cannot_call_is_refused(tmp_path):
    (tmp_path / "r.py").write_text("def compute_score(data_source, solution_str, ground_truth, tokenizer):\n"
                                   "    return 0.0\n")
    from verl.config import RewardFnConfig, build_section
    from verl.rewards.manager import RewardManager

    cfg = build_section(RewardFnConfig, {"type": "python", "function": f"{tmp_path}/r.py:compute_score"}, "reward_fn")
    with pytest.raises(ConfigError, match=r"requires tokenizer, which real verl does not pass"):
        RewardManager(cfg)
    cfg = build_section(RewardFnConfig, {"type": "python", "function": f"{tmp_path}/r.py:compute_score",
                                         "kwargs": {"tokenizer": 1, "other": 2}}, "reward_fn")
    with pytest.raises(ConfigError, match=r"other \(reward_kwargs\) is not a parameter"):
        RewardManager(cfg)
