"""Real verl's other engines' keys on our FSDP2 engine (verl/compat/real_engines.py): model_engine=megatron
(--config-name=ppo_megatron_trainer), the megatron.* notes, Megatron's optimizer schedule, the refusals."""

import pytest

from verl.compat.translate import load_translated, translate
from verl.errors import ConfigError
from verl.trainer import main_ppo
from verl.trainer.example_scripts import write_rows
from verl.trainer.preflight import MemoryRefused

A, M = "actor_rollout_ref.actor", "actor_rollout_ref.actor.megatron"


@pytest.fixture
def base(tmp_path):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k", n=4)
    return [f"data.train_files={train}", "actor_rollout_ref.model.path=tiny:gpt2", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=10", "trainer.device=cpu"]


def meg(base, *extra):
    return translate(["--config-path=config", "--config-name=ppo_megatron_trainer", *base, *extra])


def test_parallel_sizes_are_one_note_naming_every_key(base):
    tr = meg(base, f"{M}.tensor_model_parallel_size=4", f"{M}.pipeline_model_parallel_size=2",
             f"{M}.expert_model_parallel_size=8", "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=4")
    lines = [n for n in tr.notes if "Megatron parallel sizes" in n]
    assert len(lines) == 1
    for key in (f"{M}.tensor_model_parallel_size=4", f"{M}.pipeline_model_parallel_size=2",
                f"{M}.expert_model_parallel_size=8", "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=4"):
        assert key in lines[0]
    assert "(FSDP2) shards weights" in lines[0] and "MoE models are not tested here yet" in lines[0]
    assert "context parallelism" not in lines[0] and tr.memory_reasons == []
    load_translated(tr)  # and it is a valid config


def test_context_parallelism_names_itself_in_a_memory_refusal(base, monkeypatch, capsys):
    tr = meg(base, f"{M}.context_parallel_size=2", "data.max_prompt_length=1024", "data.max_response_length=3072")
    assert len(tr.memory_reasons) == 1 and f"{M}.context_parallel_size=2" in tr.memory_reasons[0]
    assert "up to 4096 tokens" in tr.memory_reasons[0]
    assert "no context parallelism" in next(n for n in tr.notes if "Megatron parallel sizes" in n)

    def refused(config_path, overrides):  # the preflight's refusal on a card the sequences do not fit
        raise MemoryRefused("training.micro_batch_size: the update needs 90 GiB of 80 GiB")

    monkeypatch.setattr(main_ppo, "run_training", refused)
    rc = main_ppo.main(["--config-path=config", "--config-name=ppo_megatron_trainer", *base,
                        f"{M}.context_parallel_size=2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"error: {M}.context_parallel_size=2: real verl splits each sequence")
    assert err[0].endswith("do not fit this card: training.micro_batch_size: the update needs 90 GiB of 80 GiB")


def test_megatron_schedule_decays_to_min_lr(base):
    cfg = load_translated(meg(base, f"{A}.optim.lr=2e-6", f"{A}.optim.lr_decay_style=cosine", f"{A}.optim.min_lr=2e-7",
                              f"{A}.optim.lr_warmup_steps_ratio=0.2", "critic.optim.lr_decay_style=linear"))
    t = cfg.training
    assert (t.lr_scheduler, t.min_lr_ratio, t.warmup_steps) == ("cosine", pytest.approx(0.1), 2)
    assert (t.weight_decay_1d, t.critic_lr_scheduler) == (False, "linear")
    styles = load_translated(meg(base, f"{A}.optim.lr_decay_style=inverse-square-root")).training
    assert styles.lr_scheduler == "inverse_sqrt"


@pytest.mark.parametrize("arg, says", [
    (f"{A}.optim.lr_decay_style=WSD", f"real verl's {A}.optim.lr_decay_style=WSD is not supported"),
    (f"{A}.optim.min_lr=1e-5", f"{A}.optim.min_lr: must be in [0, {A}.optim.lr=1e-06]"),
    (f"{A}.optim.lr_warmup_init=1e-7", "a warm-up from a learning rate above 0"),
    (f"{A}.optim.lr_decay_steps=5", "a decay over another step count than the run's"),
    (f"{A}.optim.exp_avg_dtype=bf16", "Adam moments or gradient buffers below float32"),
    (f"{A}.optim.lr_scheduler_type=cosine", "is not a key of its Megatron optimizer"),
    (f"{A}.optim.optimizer=sgd", f"real verl's {A}.optim.optimizer=sgd is not supported"),
    (f"+{M}.override_transformer_config.moe_aux_loss_coeff=0.01", "changing Megatron's transformer config"),
    (f"{M}.router_replay.mode=R2", "replaying MoE routing"),
    (f"{A}.strategy=veomni", "its engine's own optimizer and schedule"),
])
def test_megatron_settings_that_change_the_update_are_refused_naming_the_key(base, arg, says):
    with pytest.raises(ConfigError) as err:
        meg(base, arg)
    assert says in str(err.value) and arg.lstrip("+").split("=")[0] in str(err.value)


def test_megatron_keys_without_its_config_are_refused(base):
    with pytest.raises(ConfigError, match=rf"real verl's {M}.param_offload is read by its Megatron engine only: "
                                          "give model_engine=megatron"):
        translate(base + [f"{M}.param_offload=True"])
    with pytest.raises(ConfigError, match=rf"{A}.strategy=megatron is not supported: .*model_engine=megatron"):
        translate(base + [f"{A}.strategy=megatron"])
    assert load_translated(translate(base + ["model_engine=megatron", f"{A}.strategy=megatron"]))  # real verl's pair
    with pytest.raises(ConfigError, match="real verl's model_engine=torchtitan is not supported: .*own formulas"):
        translate(base + ["model_engine=torchtitan"])


def test_offloads_recompute_and_fusions_are_noted(base):
    tr = meg(base, f"{M}.param_offload=True", f"{M}.optimizer_offload=True", f"{M}.use_mbridge=True",
             f"{M}.override_transformer_config.recompute_granularity=full",
             f"+{M}.override_transformer_config.apply_rope_fusion=True",
             f"+{M}.override_transformer_config.moe_router_dtype=fp32",
             f"{A}.optim.betas=[0.9,0.95]", f"+{A}.optim.override_optimizer_config.optimizer_cpu_offload=True")
    cfg = load_translated(tr)
    assert cfg.training.offload_optimizer and cfg.model.enable_gradient_checkpointing
    notes = "\n".join(tr.notes)
    for key in (f"{M}.param_offload=True", f"{M}.use_mbridge=True", f"{M}.override_transformer_config.apply_rope_fusion",
                f"{M}.override_transformer_config.moe_router_dtype=fp32", f"{A}.optim.betas",
                f"{A}.optim.override_optimizer_config.optimizer_cpu_offload=True",
                f"{M}.override_transformer_config.recompute_granularity=full: model.enable_gradient_checkpointing"):
        assert key in notes, key
    assert "does not pass optim.betas" in notes  # Megatron trains at 0.9, 0.999 there, whatever betas say


def test_fsdp_min_lr_ratio_and_betas(base):
    cfg = load_translated(translate(base + [f"{A}.optim.lr_scheduler_type=cosine", f"{A}.optim.min_lr_ratio=0.1"]))
    assert (cfg.training.lr_scheduler, cfg.training.min_lr_ratio, cfg.training.weight_decay_1d) == ("cosine", 0.1, True)
    with pytest.raises(ConfigError, match="other Adam betas"):
        translate(base + [f"{A}.optim.betas=[0.9,0.95]"])
    with pytest.raises(ConfigError, match=rf"{A}.optim.min_lr_ratio: must be in \[0, 1\]"):
        translate(base + [f"{A}.optim.min_lr_ratio=2"])


def test_override_config_reads_its_model_config_entry_as_real_verl(base):
    # real verl's HFModelConfig: override_config.model_config, when there, is the override (the Megatron scripts')
    tr = meg(base, "+actor_rollout_ref.model.override_config.model_config.max_position_embeddings=256",
             "+actor_rollout_ref.model.override_config.max_position_embeddings=512")
    assert tr.values["model.override_config"] == {"max_position_embeddings": 256}
    with pytest.raises(ConfigError, match=r"override_config.model_config=.*expected a mapping"):
        translate(base + ["+actor_rollout_ref.model.override_config.model_config=3"])
