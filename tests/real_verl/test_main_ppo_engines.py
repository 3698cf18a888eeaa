"""Real verl's other engines' keys on our FSDP2 engine (verl/compat/real_engines.py): model_engine=megatron
(--config-name=ppo_megatron_trainer), the megatron.* notes, Megatron's optimizer schedule, the refusals."""

import math

import pytest

from tools.real_verl_scripts.harness import write_rows
from verl.compat.translate import load_translated, translate
from verl.errors import ConfigError
from verl.trainer import main_ppo
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
    assert "(FSDP2) shards weights" in lines[0] and "MoE models train on one device here" in lines[0]
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
    (f"+{M}.override_transformer_config.num_layers=4", "changing Megatron's transformer config"),
    (f"{M}.router_replay.mode=R3", "replays the rollout's routing, which real verl records only with"),
    (f"{A}.strategy=veomni", "the VeOmni engine with another engine's optimizer config; give model_engine=veomni"),
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
    with pytest.raises(ConfigError, match=rf"real verl's {A}.veomni.fsdp_size is read by its VeOmni engine only: "
                                          "give model_engine=veomni"):
        translate(base + ["model_engine=torchtitan", f"{A}.veomni.fsdp_size=8"])


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


# ---- VeOmni and TorchTitan: their optimizers' schedules, by hand from the formulas in real_engines.py's docstring

V, T = f"{A}.veomni", f"{A}.torchtitan"


def lrs(cfg, critic=False):
    """The learning rate of each of the run's steps, as our actor (critic) schedules it."""
    import torch

    from verl.workers.optim import build_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.training.critic_lr if critic else cfg.training.lr)
    scheduler, out = build_scheduler(opt, cfg.training, critic=critic), []
    for _ in range(cfg.training.total_steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return out


def test_veomni_command_line_trains_its_cosine_with_start_floor_and_decay_end(base):
    # real verl's VeOmni layout (trainer/config/optim/veomni.yaml, engine/veomni.yaml); 10 steps
    tr = translate(base + ["model_engine=veomni", f"{A}.strategy=veomni", f"{A}.optim.lr=1e-6",
                           f"{A}.optim.lr_start=2e-7", f"{A}.optim.lr_min=1e-7", f"{A}.optim.lr_warmup_steps_ratio=0.2",
                           f"{A}.optim.lr_decay_ratio=0.8", f"{A}.optim.lr_warmup_steps=5", f"{A}.optim.clip_grad=0.5",
                           f"{A}.optim.weight_decay=0.05", f"{V}.fsdp_size=8", f"{V}.ulysses_parallel_size=1",
                           f"{V}.param_offload=True", f"{V}.optimizer_offload=True", f"{V}.attn_implementation=sdpa",
                           "actor_rollout_ref.rollout.n=2"])
    cfg = load_translated(tr)
    t = cfg.training
    assert (t.lr_scheduler, t.warmup_steps, t.lr_decay_steps, t.grad_clip, t.weight_decay) == ("cosine", 2, 8, 0.5, 0.05)
    assert (t.warmup_start_ratio, t.min_lr_ratio) == (pytest.approx(0.2), pytest.approx(0.1))
    assert t.weight_decay_1d and not t.warmup_from_first_step and t.offload_optimizer
    # VeOmni: W = int(10 x 0.2) = 2, D = int(10 x 0.8) = 8, lr 1e-6, lr_start 2e-7, lr_min 1e-7 (m = 0.1):
    # s = 0, 1: (2e-7 + 8e-7 s / 2) -> 2e-7, 6e-7; s = 2..8: 1e-7 + 9e-7 (1 + cos(pi (s - 2) / 6)) / 2; s = 9: 1e-7
    cos = [1.0, 0.9330127018922193, 0.75, 0.5, 0.25, 0.0669872981077807, 0.0]
    want = [2e-7, 6e-7] + [1e-7 + 9e-7 * c for c in cos] + [1e-7]
    assert lrs(cfg) == pytest.approx(want, rel=1e-9)
    notes = "\n".join(tr.notes)
    assert f"ignored {A}.optim.lr_warmup_steps=5: real verl's VeOmni engine passes only lr_warmup_steps_ratio" in notes
    assert f"ignored the VeOmni parallel sizes {V}.fsdp_size=8, {V}.ulysses_parallel_size=1" in notes
    assert f"ignored {V}.param_offload=True" in notes and f"ignored {V}.attn_implementation=sdpa: kernel" in notes


def test_veomni_defaults_to_cosine_and_its_critic_has_its_own(base):
    cfg = load_translated(translate(base + ["model_engine=veomni", "algorithm.adv_estimator=gae",
                                            "critic.optim.lr_scheduler_type=constant", "critic.optim.lr_start=5e-6",
                                            "critic.optim.lr_warmup_steps_ratio=0.5"]))
    t = cfg.training
    assert (t.lr_scheduler, t.min_lr_ratio, t.lr_decay_steps, t.warmup_steps) == ("cosine", 0.0, 10, 0)
    # the actor: cosine from 1e-6 to 0 over 10 steps; the critic (lr 1e-5): 5e-6 + 5e-6 s / 5, then 1e-5
    assert lrs(cfg)[5] == pytest.approx(1e-6 * 0.5)
    assert lrs(cfg, critic=True) == pytest.approx([5e-6, 6e-6, 7e-6, 8e-6, 9e-6] + [1e-5] * 5)


def test_torchtitan_command_line_warms_up_from_the_first_step_and_decays_over_its_10000_steps(base):
    tr = translate(base + ["model_engine=torchtitan", f"{A}.strategy=torchtitan", f"{A}.optim.lr=1e-6",
                           f"{A}.optim.lr_warmup_steps=4", f"{A}.optim.decay_type=cosine",
                           f"{A}.optim.min_lr_factor=0.1", f"{A}.optim.clip_grad=5.0", f"{A}.optim.eps=1e-8",
                           f"{T}.tensor_parallel_size=2", f"{T}.context_parallel_size=2",
                           f"{T}.use_torch_compile=False", "data.max_prompt_length=512"])
    cfg = load_translated(tr)
    t = cfg.training
    assert (t.lr_scheduler, t.warmup_steps, t.lr_decay_steps, t.min_lr_ratio) == ("cosine", 4, 10000, 0.1)
    assert t.warmup_from_first_step and t.grad_clip == 1.0 and t.weight_decay_1d
    # TorchTitan: (s + 1) / 4 for s = 0..3, 1 at s = 4, then 0.1 + 0.9 (1 + cos(pi (s - 4) / 9996)) / 2
    tail = [1e-6 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 4) / 9996))) for s in range(4, 10)]
    assert lrs(cfg) == pytest.approx([2.5e-7, 5e-7, 7.5e-7, 1e-6] + tail, rel=1e-12)
    notes = "\n".join(tr.notes)
    assert f"ignored {A}.optim.clip_grad=5.0: real verl's TorchTitan engine clips at TorchTitan's training.max_norm" \
        in notes
    assert f"ignored the TorchTitan parallel sizes {T}.tensor_parallel_size=2, {T}.context_parallel_size=2" in notes
    assert len(tr.memory_reasons) == 1 and f"{T}.context_parallel_size=2" in tr.memory_reasons[0]


def test_torchtitan_linear_default_and_warm_up_ratio(base):
    cfg = load_translated(translate(base + ["model_engine=torchtitan", f"{A}.optim.lr_warmup_steps_ratio=0.3"]))
    # W = int(0.3 x 10) = 3: 1/3, 2/3, 1, 1, then linear 1 - (s - 3) / 9997
    want = [1e-6 / 3, 2e-6 / 3, 1e-6, 1e-6] + [1e-6 * (1 - (s - 3) / 9997) for s in range(4, 10)]
    assert lrs(cfg) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("args, says", [
    (["model_engine=veomni", f"{A}.optim.lr_scheduler_type=linear"], "floors at a fixed 1e-7"),
    (["model_engine=veomni", f"{A}.optim.lr_min=1e-5"], f"{A}.optim.lr_min: must be in [0, {A}.optim.lr=1e-06]"),
    (["model_engine=veomni", f"{A}.optim.lr_start=2e-6"], f"{A}.optim.lr_start: must be in [0,"),
    (["model_engine=veomni", f"{A}.optim.min_lr_ratio=0.1"], "is not a key of its VeOmni optimizer"),
    (["model_engine=veomni", f"{A}.optim.optimizer=anyprecision_adamw"], "other optimizers"),
    (["model_engine=veomni", f"{A}.optim.betas=[0.9,0.95]"], "other Adam betas"),
    (["model_engine=veomni", f"{V}.load_checkpoint_path=/ckpt"], "loading the engine's own checkpoint"),
    (["model_engine=veomni", f"{V}.router_replay.mode=R3"], "replays the rollout's routing"),
    (["model_engine=veomni", f"{V}.qat_implementation=fp8"], "quantization-aware training"),
    (["model_engine=veomni", f"{M}.param_offload=True"], "read by its Megatron engine only"),
    (["model_engine=torchtitan", f"{A}.optim.name=Adam"], "other TorchTitan optimizers"),
    (["model_engine=torchtitan", f"{A}.optim.eps=1e-6"], "another Adam epsilon"),
    (["model_engine=torchtitan", f"{A}.optim.decay_type=wsd"], f"{A}.optim.decay_type=wsd is not supported"),
    (["model_engine=torchtitan", f"{A}.optim.lr_scheduler_type=cosine"], "is not a key of its TorchTitan optimizer"),
    (["model_engine=torchtitan", f"{A}.optim.lr_min=0.0"], "read by its VeOmni engine only"),
    (["model_engine=torchtitan", "trainer.total_training_steps=10002"], "at most 10001 steps"),
    ([f"{A}.optim.decay_type=linear"], "read by its TorchTitan engine only: give model_engine=torchtitan"),
    ([f"{T}.tensor_parallel_size=2"], "read by its TorchTitan engine only"),
])
def test_veomni_and_torchtitan_settings_that_change_the_update_are_refused(base, args, says):
    with pytest.raises(ConfigError) as err:
        translate(base + args)
    assert says in str(err.value)


def test_moe_routing_replay_and_the_aux_loss_map(base):
    """R2 replays the pi_old pass's routing, R3 (with the rollout recording it) the engine's; Megatron's
    moe_aux_loss_coeff is the router's load-balancing loss here (docs/moe.md)."""
    r = "actor_rollout_ref.rollout"
    cfg = load_translated(meg(base, f"{M}.router_replay.mode=R2"))
    assert cfg.rollout.routing_replay == "pi_old"
    cfg = load_translated(meg(base, f"{M}.router_replay.mode=R3", f"{r}.enable_rollout_routing_replay=True",
                              f"{r}.name=hf"))
    assert cfg.rollout.routing_replay == "engine"
    cfg = load_translated(meg(base, f"+{M}.override_transformer_config.moe_aux_loss_coeff=0.01"))
    assert cfg.training.router_aux_loss_coef == 0.01
    assert load_translated(meg(base, f"{M}.router_replay.mode=disabled")).rollout.routing_replay == "off"
