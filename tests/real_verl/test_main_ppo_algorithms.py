"""Real verl's loss modes and estimators through main_ppo: the key sets of its algorithm example
scripts (examples/{cispo,sapo,gmpo,gpg,otb}_trainer at real verl's main branch), with model, data
and sizes replaced, translate to our presets' math; one of them trains a step."""

import json
import math

import pytest

from real_verl_gsm8k import write_gsm8k
from verl.algorithms.policy_losses import POLICY_LOSSES
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError
from verl.trainer.main_ppo import main

A = "actor_rollout_ref.actor"


@pytest.fixture
def base(tmp_path):
    train = write_gsm8k(tmp_path / "train.parquet", 8)
    return [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=4",
            f"{A}.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=1",
            f"trainer.default_local_dir={tmp_path / 'out'}", "data.max_response_length=8",
            "data.max_prompt_length=64"]


def algo(line):
    return load_translated(translate(line)).algorithm


def test_cispo_script(base):
    # run_cispo_qwen2_5_0_5b_gsm8k.sh: grpo advantages, cispo loss, clip_ratio_low=10 (no lower bound), high 0.2
    a = algo(base + ["algorithm.adv_estimator=grpo", f"{A}.policy_loss.loss_mode=cispo", f"{A}.clip_ratio_low=10",
                     f"{A}.clip_ratio_high=0.2", f"{A}.use_kl_loss=True", f"{A}.kl_loss_coef=0.001",
                     f"{A}.kl_loss_type=low_var_kl", f"{A}.entropy_coeff=0", "algorithm.use_kl_in_reward=False"])
    assert (a.adv_estimator, a.policy_loss, a.clip_ratio_low, a.clip_ratio_high) == ("grpo", "cispo", 10.0, 0.2)
    assert (a.use_kl_loss, a.kl_estimator, a.loss_agg_mode) == (True, "k3", "token-mean")


def test_sapo_script_and_its_temperatures(base):
    # run_qwen30b_sapo.sh: tau_pos=1.0 tau_neg=1.05; real verl's sapo always averages per sequence
    a = algo(base + ["algorithm.adv_estimator=grpo", f"{A}.policy_loss.loss_mode=sapo", f"{A}.tau_pos=1.0",
                     f"{A}.tau_neg=1.2", f"{A}.loss_agg_mode=token-mean"])
    assert (a.policy_loss, a.loss_params.tau_pos, a.loss_params.tau_neg) == ("sapo", 1.0, 1.2)
    # sapo's own term averages per sequence whatever loss_agg_mode says (real verl's too); the KL and
    # entropy terms follow loss_agg_mode in both
    assert a.loss_agg_mode == "token-mean" and POLICY_LOSSES["sapo"].agg_mode == "seq-mean-token-mean"


def test_gmpo_script(base):
    # gmpo_trainer/test_dapo_7b_math.sh: geo_mean with clip 0.4 and loss_agg_mode=token-mean (ignored there too)
    a = algo(base + ["algorithm.adv_estimator=grpo", f"{A}.policy_loss.loss_mode=geo_mean", f"{A}.clip_ratio_low=0.4",
                     f"{A}.clip_ratio_high=0.4", f"{A}.loss_agg_mode=token-mean", f"{A}.use_kl_loss=False"])
    assert (a.policy_loss, a.clip_ratio_low, a.clip_ratio_high, a.loss_agg_mode) == ("geo_mean", 0.4, 0.4,
                                                                                      "token-mean")
    assert POLICY_LOSSES["geo_mean"].agg_mode == "seq-mean-token-mean"  # its own term, as real verl's


def test_gpg_and_otb_scripts(base):
    a = algo(base + ["algorithm.adv_estimator=gpg", f"{A}.policy_loss.loss_mode=gpg", f"{A}.use_kl_loss=False"])
    assert (a.name, a.adv_estimator, a.policy_loss) == ("gpg", "gpg", "gpg")
    # otb_trainer/run_qwen2_5-7b.sh: calculate_sum_pi_squared=True is accepted (computed when OTB reads it)
    a = algo(base + ["algorithm.adv_estimator=optimal_token_baseline", f"{A}.calculate_sum_pi_squared=True",
                     f"{A}.use_kl_loss=False", f"{A}.entropy_coeff=0"])
    assert (a.name, a.adv_estimator, a.policy_loss) == ("otb", "optimal_token_baseline", "ppo")


def test_cov_losses_take_their_parameters(base):
    a = algo(base + ["algorithm.adv_estimator=grpo", f"{A}.policy_loss.loss_mode=clip_cov",
                     f"{A}.policy_loss.clip_cov_ratio=0.001", f"{A}.policy_loss.clip_cov_lb=0.5",
                     f"{A}.policy_loss.clip_cov_ub=4"])
    p = a.loss_params
    assert (a.policy_loss, p.clip_cov_ratio, p.clip_cov_lb, p.clip_cov_ub) == ("clip_cov", 0.001, 0.5, 4.0)
    a = algo(base + ["algorithm.adv_estimator=grpo", f"{A}.policy_loss.loss_mode=kl_cov",
                     f"{A}.policy_loss.kl_cov_ratio=0.002", f"{A}.policy_loss.ppo_kl_coef=0.5"])
    assert (a.policy_loss, a.loss_params.kl_cov_ratio, a.loss_params.ppo_kl_coef) == ("kl_cov", 0.002, 0.5)


def test_unknown_loss_mode_and_gdpo_keys_are_refused(base):
    with pytest.raises(ConfigError, match="loss_mode"):
        translate(base + [f"{A}.policy_loss.loss_mode=dppo_tv"])
    with pytest.raises(ConfigError, match="gdpo_reward_keys"):
        translate(base + ["algorithm.adv_estimator=gdpo", "algorithm.gdpo_reward_keys=['acc','fmt']"])


def test_a_cispo_line_trains_a_step(base, tmp_path):
    rc = main(base + ["algorithm.adv_estimator=grpo", f"{A}.policy_loss.loss_mode=cispo", f"{A}.clip_ratio_low=10",
                      f"{A}.clip_ratio_high=0.2", "trainer.logger=['console']"])
    assert rc in (0, None)
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if "actor/pg_loss" in r][-1]
    assert math.isfinite(step["actor/pg_loss"]) and step["actor/pg_clipfrac"] >= 0


def test_chat_template_kwargs_map(base):
    # real verl's +data.apply_chat_template_kwargs.enable_thinking=False (Qwen3 scripts): passed to the template
    cfg = load_translated(translate(base + ["+data.apply_chat_template_kwargs.enable_thinking=False"]))
    assert cfg.data.chat_template_kwargs == {"enable_thinking": False}
    with pytest.raises(ConfigError, match="apply_chat_template_kwargs"):
        translate(base + ["data.apply_chat_template_kwargs=thinking"])


def test_model_override_config_reaches_the_actor_and_the_engine(base, tmp_path):
    # gmpo_trainer/test_dapo_7b_math.sh: +actor_rollout_ref.model.override_config.max_position_embeddings=32768.
    # tiny:llama allows 512 positions: 500 prompt + 20 response tokens only fit with the override.
    import torch

    from verl.models.loading import check_context_length, load_causal_lm
    from verl.models.tiny import resolve_model_name
    from verl.rollout.in_process import engine_start_args

    line = [x for x in base if not x.startswith(("actor_rollout_ref.model.path", "data.max_"))]
    line += ["actor_rollout_ref.model.path=tiny:llama", "data.max_prompt_length=500", "data.max_response_length=20"]
    with pytest.raises(ConfigError, match="at most 512"):
        check_context_length(load_translated(translate(line)))
    cfg = load_translated(translate(line + ["+actor_rollout_ref.model.override_config.max_position_embeddings=1024"]))
    assert cfg.model.override_config == {"max_position_embeddings": 1024}
    check_context_length(cfg)  # 520 <= 1024 now
    model = load_causal_lm(cfg.model, torch.float32)
    assert model.config.max_position_embeddings == 1024
    # the engine starts from an exported folder whose config.json carries the override, not the original folder
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name("tiny:llama"))
    path = engine_start_args(model, tokenizer, cfg)["model_path"]
    assert path != resolve_model_name("tiny:llama")
    assert json.load(open(f"{path}/config.json"))["max_position_embeddings"] == 1024
    with pytest.raises(ConfigError, match="model.override_config.max_positon_embeddings: not a field"):
        check_context_length(load_translated(translate(line + [
            "+actor_rollout_ref.model.override_config.max_positon_embeddings=1024"])))


def test_an_override_that_changes_weight_shapes_is_one_line(base):
    # GPT-2 learns its position embeddings: more positions would need a bigger wpe matrix than the checkpoint's
    import torch

    from verl.models.loading import ModelLoadError, load_causal_lm

    cfg = load_translated(translate(base + ["+actor_rollout_ref.model.override_config.max_position_embeddings=1024"]))
    with pytest.raises(ModelLoadError, match="model.override_config: max_position_embeddings changes the shape"):
        load_causal_lm(cfg.model, torch.float32)
