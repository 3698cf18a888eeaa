"""Config: defaults run, typos and impossible values are named, overrides apply."""

import pytest

from verl.config import ConfigError, config_from_dict, load_config


def test_defaults_resolve():
    cfg = load_config(None)
    assert cfg.training.total_steps == 20
    assert cfg.algorithm.adv_estimator == "gae"  # ppo preset
    assert cfg.rollout.n == 1
    assert cfg.checkpoint.save_dir == "outputs/tiny-gpt2-ppo"


def test_seed_example_loads_with_attribute_access():
    cfg = load_config("examples/config_gpt2.yaml")
    assert cfg.training.total_steps == 100
    assert cfg.rollout.name == "vllm" and cfg.rollout.max_num_seqs == 16
    assert cfg.algorithm.gamma == 0.99 and cfg.algorithm.lam == 0.95
    assert cfg.reward_fn.target == "I love reinforcement learning"
    # The seed's closing line says ./outputs/gpt2-ppo/: the default output dir agrees.
    assert cfg.checkpoint.save_dir == "outputs/gpt2-ppo"


def test_unknown_key_names_path_and_suggestion():
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"training": {"total_step": 5}})
    msg = str(exc.value)
    assert "training.total_step" in msg and "did you mean 'training.total_steps'" in msg


def test_unknown_section_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'rollout'"):
        config_from_dict({"rollot": {}})


@pytest.mark.parametrize("data,key", [
    ({"training": {"lr": -1}}, "training.lr"),
    ({"training": {"lr": "fast"}}, "training.lr"),
    ({"training": {"total_steps": 0}}, "training.total_steps"),
    ({"training": {"batch_size": "x"}}, "training.batch_size"),
    ({"model": {"dtype": "float64"}}, "model.dtype"),
    ({"rollout": {"name": "sglang2"}}, "rollout.name"),
    ({"rollout": {"top_p": 1.5}}, "rollout.top_p"),
    ({"algorithm": {"name": "ppo2"}}, "algorithm.name"),
    ({"algorithm": {"gamma": 2}}, "algorithm.gamma"),
    ({"algorithm": {"clip_ratio_c": 0.5}}, "algorithm.clip_ratio_c"),
    ({"reward_fn": {"type": "python"}}, "reward_fn.function"),
    ({"reward_fn": {"type": "huggingface_rm"}}, "reward_fn.model_name"),
    ({"model": {"use_flash_attention": "maybe"}}, "model.use_flash_attention"),
    ({"model": {"attn_implementation": "flash"}}, "model.attn_implementation"),
    ({"model": {"attn_implementation": "eager", "use_flash_attention": True}}, "model.attn_implementation"),
    ({"critic": {"share_actor": True, "name": "some/critic"}}, "critic.share_actor"),
    ({"critic": {"share_actor": True}, "distributed": {"backend": "ray"}}, "critic.share_actor"),
    ({"critic": {"share_actor": True, "vf_coef": 0}}, "critic.vf_coef"),
])
def test_bad_values_name_the_key(data, key):
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data)
    assert key in str(exc.value)


def test_attn_implementation_auto_picks_eager_for_low_precision_cpu():
    """auto: SDPA everywhere except a bf16/fp16 model on the CPU (eager); explicit values win."""
    from verl.models.loading import attn_implementation

    def pick(dtype="float32", impl="auto", device_type=None, override=None):
        return attn_implementation(config_from_dict({"model": {"dtype": dtype, "attn_implementation": impl}}).model,
                                   device_type, override)

    assert pick("bfloat16", device_type="cpu") == "eager"
    assert pick("float16", device_type="cpu") == "eager"
    assert pick("float32", device_type="cpu") == "sdpa"
    assert pick("bfloat16", device_type="cuda") == "sdpa"
    assert pick("bfloat16") == "sdpa"
    assert pick("bfloat16", "sdpa", "cpu") == "sdpa"
    assert pick("float32", "eager", "cuda") == "eager"
    assert pick("float32", device_type="cpu", override="bfloat16") == "eager"  # critic.dtype


def test_batch_arithmetic_must_divide():
    # 4 prompts x 1 sample = 4 sequences; a mini-batch of 3 cannot split them.
    with pytest.raises(ConfigError, match="training.mini_batch_size"):
        config_from_dict({"training": {"batch_size": 4, "mini_batch_size": 3}})
    # micro-batch 3 does not divide the mini-batch of 4.
    with pytest.raises(ConfigError, match="training.micro_batch_size"):
        config_from_dict({"training": {"batch_size": 4, "micro_batch_size": 3}})


def test_group_estimator_needs_group():
    with pytest.raises(ConfigError, match="rollout.n"):
        config_from_dict({"algorithm": {"name": "grpo"}, "rollout": {"n": 1}})
    assert config_from_dict({"algorithm": {"name": "grpo"}}).rollout.n == 4
    # real verl's rule for a lone sample (its reward is its advantage) makes n 1 train
    cfg = config_from_dict({"algorithm": {"name": "grpo", "group_of_one": "score"}, "rollout": {"n": 1}})
    assert cfg.rollout.n == 1


def test_preset_fills_only_unset_keys():
    cfg = config_from_dict({"algorithm": {"name": "grpo", "loss_agg_mode": "seq-mean-token-mean"}})
    assert cfg.algorithm.loss_agg_mode == "seq-mean-token-mean"
    assert cfg.algorithm.use_kl_loss and cfg.algorithm.kl_estimator == "k3"
    dapo = config_from_dict({"algorithm": {"name": "dapo", "dynamic_sampling": {"enable": False}}})
    assert dapo.algorithm.dynamic_sampling.enable is False and dapo.algorithm.overlong_penalty.enable
    assert dapo.algorithm.clip_ratio_high == 0.28


def test_overrides_parse_yaml_values(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  total_steps: 3\n")
    cfg = load_config(str(path), ["training.lr=2e-5", "logging.backends=[jsonl, tensorboard]", "rollout.n=2"])
    assert cfg.training.lr == 2e-5 and cfg.training.total_steps == 3
    assert cfg.logging.backends == ["jsonl", "tensorboard"] and cfg.rollout.n == 2
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config(str(path), ["training.lr"])


def test_malformed_yaml_gives_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("training:\n  total_steps: 3\n  lr: [1, 2\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert "bad.yaml" in str(exc.value) and "line" in str(exc.value) and "column" in str(exc.value)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("/nonexistent/config.yaml")


def test_rollout_name_auto_picks_vllm_on_a_gpu_when_installed(monkeypatch):
    import importlib.util

    import torch

    assert load_config(None, ["device=cpu"]).rollout.name == "hf"  # the CPU default: HF, silently
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real_find(name, *a))
    cfg = load_config(None)
    assert cfg.rollout.name == "vllm" and "auto -> vllm" in cfg.rollout.auto_note
    assert load_config(None, ["rollout.name=hf"]).rollout.name == "hf"  # an explicit choice stays
    assert load_config(None, ["rollout.hf_weight_copy=true"]).rollout.name == "hf"  # an HF-only key: HF
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find(name, *a))
    cfg = load_config(None)
    assert cfg.rollout.name == "hf" and "vLLM is not installed" in cfg.rollout.auto_note


def test_packing_auto_is_packed_on_a_gpu_and_padded_elsewhere(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = load_config(None)  # device auto on a machine without CUDA
    assert cfg.training.use_packed_samples is False and cfg.training.packed_by_default is False
    cfg = load_config(None, ["device=cuda"])
    assert cfg.training.use_packed_samples is True and cfg.training.packed_by_default is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert load_config(None).training.use_packed_samples is True  # device auto with CUDA here
    assert load_config(None, ["device=cpu"]).training.use_packed_samples is False
    cfg = load_config(None, ["device=cuda", "training.use_packed_samples=false"])  # an explicit choice stays
    assert cfg.training.use_packed_samples is False and not getattr(cfg.training, "packed_by_default", False)
    cfg = load_config(None, ["device=cuda", "training.use_packed_samples=true"])
    assert cfg.training.use_packed_samples is True and not getattr(cfg.training, "packed_by_default", False)


def test_model_dtype_auto_is_bfloat16_on_a_bf16_gpu_and_float32_elsewhere(monkeypatch):
    import torch

    from verl.config import root

    cfg = load_config(None, ["device=cpu"])
    assert cfg.model.dtype == "float32" and not getattr(cfg.model, "dtype_note", "")  # the CPU: silent
    monkeypatch.setattr(root, "_gpu_has_bf16", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = load_config(None)
    assert cfg.model.dtype == "bfloat16" and "auto -> bfloat16" in cfg.model.dtype_note
    assert load_config(None, ["model.dtype=float32"]).model.dtype == "float32"  # an explicit choice stays
    assert load_config(None, ["device=cpu"]).model.dtype == "float32"  # device cpu beside a GPU
    # mixed_precision: param_copy needs a 16-bit dtype: auto passes on the GPU, and is refused once
    # it resolves to float32 on the CPU, naming the key
    assert load_config(None, ["model.mixed_precision=param_copy"]).model.dtype == "bfloat16"
    with pytest.raises(ConfigError, match="model.mixed_precision: param_copy"):
        load_config(None, ["device=cpu", "model.mixed_precision=param_copy"])
    monkeypatch.setattr(root, "_gpu_has_bf16", lambda: False)  # an older GPU
    cfg = load_config(None)
    assert cfg.model.dtype == "float32" and "no bfloat16 support" in cfg.model.dtype_note


def test_update_speedups_auto_are_on_for_the_single_process_actor_on_a_gpu(monkeypatch):
    """model.torch_compile, model.mixed_precision and training.logprob_keep_logits on auto: on for
    full fine-tuning in bf16 on a CUDA device in one process (H200 e2e-b: update 4.73 -> 2.72 s a step),
    off on the CPU and under Ray; param_copy also off for LoRA and with training.offload_optimizer,
    torch_compile for LoRA without model.lora.fused (compiled peft layers disagreed on an H100)."""
    import torch

    from verl.config import root

    def speedups(cfg):
        return cfg.model.torch_compile, cfg.model.mixed_precision, cfg.training.logprob_keep_logits

    cfg = load_config(None, ["device=cpu"])
    assert speedups(cfg) == (False, "autocast", False) and cfg.training.auto_note == ""  # the CPU: silent
    monkeypatch.setattr(root, "_gpu_has_bf16", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = load_config(None)
    assert speedups(cfg) == (True, "param_copy", True)
    assert cfg.training.auto_note.startswith("auto on the GPU -> model.torch_compile: true, "
                                             "model.mixed_precision: param_copy, training.logprob_keep_logits: true")
    # LoRA: the fused adapter layers (the default) compiled, peft's own layers eager
    assert speedups(load_config(None, ["model.lora.rank=8"])) == (True, "autocast", True)
    assert speedups(load_config(None, ["model.lora.rank=8", "model.lora.fused=false"])) == (False, "autocast", True)
    # layers the fused path does not take (dropout, named adapted tensors) run peft's forward: eager too
    assert speedups(load_config(None, ["model.lora.rank=8", "model.lora.dropout=0.05"]))[0] is False
    assert speedups(load_config(None, ["model.lora.rank=8",
                                       "model.lora.target_parameters=[mlp.experts.gate_up_proj]"]))[0] is False
    assert speedups(load_config(None, ["training.offload_optimizer=true"])) == (True, "autocast", True)
    assert speedups(load_config(None, ["model.dtype=float32"])) == (True, "autocast", True)
    # explicit choices stay, and only the keys left on auto are named
    cfg = load_config(None, ["model.torch_compile=false", "model.mixed_precision=autocast"])
    assert speedups(cfg) == (False, "autocast", True)
    assert "torch_compile" not in cfg.training.auto_note and "logprob_keep_logits: true" in cfg.training.auto_note
    cfg = load_config(None, ["model.torch_compile=false", "model.mixed_precision=autocast",
                             "training.logprob_keep_logits=false"])
    assert cfg.training.auto_note == ""
    # a config saved resolved loads back to the same values (checkpoints store the resolved keys)
    assert speedups(load_config(None, ["model.mixed_precision=param_copy", "model.torch_compile=true"]))[:2] == \
        (True, "param_copy")
