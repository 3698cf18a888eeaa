"""Starting LoRA from a saved peft adapter (model.lora.adapter_path, verl/models/lora_adapter.py; real verl's
actor_rollout_ref.model.lora_adapter_path): its settings are adopted, its weights are where training starts."""

import json
import re

import pytest
import torch

from tools.real_verl_scripts.harness import write_rows
from verl.compat.translate import load_translated, translate
from verl.config import ConfigError, config_from_dict
from verl.trainer.main_ppo import main


def save_adapter(base: str, folder, rank=4, alpha=8.0, targets=("c_attn",), seed=0) -> dict:
    """A peft adapter on `base` with random A and B (B nonzero: a fresh adapter's B is 0), saved to `folder`;
    returns its lora tensors by peft's saved name."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                           LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.02)
    model.save_pretrained(str(folder))
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _lora_state(model) -> dict:
    """{peft's saved name: tensor} of a PeftModel's adapters (the names save_pretrained writes)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().float().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def test_config_adopts_the_adapters_settings(tmp_path, tiny_gpt2):
    save_adapter(tiny_gpt2, tmp_path / "adapter", rank=4, alpha=8.0)
    lora = config_from_dict({"model": {"name": tiny_gpt2, "lora": {"adapter_path": str(tmp_path / "adapter")}}}).model.lora
    assert (lora.rank, lora.alpha, lora.dropout, lora.target_modules) == (4, 8.0, 0.0, ["c_attn"])
    # a key given as the adapter has it is accepted; another value is refused in one line naming both
    same = {"adapter_path": str(tmp_path / "adapter"), "rank": 4, "target_modules": ["c_attn"]}
    assert config_from_dict({"model": {"name": tiny_gpt2, "lora": same}}).model.lora.alpha == 8.0
    with pytest.raises(ConfigError, match=r"^model.lora.rank: 16 differs from the adapter's 4 \(.*adapter_config.json"
                                          r"\); the adapter's own settings are used"):
        config_from_dict({"model": {"name": tiny_gpt2, "lora": {**same, "rank": 16}}})
    with pytest.raises(ConfigError, match=r"^model.lora.target_modules: \['c_proj'\] differs from the adapter's"):
        config_from_dict({"model": {"name": tiny_gpt2, "lora": {**same, "target_modules": ["c_proj"]}}})


def test_missing_or_foreign_folder_is_one_line(tmp_path, tiny_gpt2):
    with pytest.raises(ConfigError, match=r"^model.lora.adapter_path: LoRA adapter folder 'nowhere' not found"):
        config_from_dict({"model": {"lora": {"adapter_path": "nowhere"}}})
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"holds no adapter_config.json: not a saved peft adapter"):
        config_from_dict({"model": {"lora": {"adapter_path": str(tmp_path / "empty")}}})
    (tmp_path / "ia3").mkdir()
    (tmp_path / "ia3" / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3"}))
    with pytest.raises(ConfigError, match=r"is not a LoRA adapter's \(peft_type 'IA3'"):
        config_from_dict({"model": {"lora": {"adapter_path": str(tmp_path / "ia3")}}})


def _real_line(tmp_path, model, extra=()):
    train = write_rows(str(tmp_path / "train.parquet"), "gsm8k")
    return [f"data.train_files={train}", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "data.max_prompt_length=64", "data.max_response_length=4", "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=1", "trainer.device=cpu",
            "trainer.logger=['console']", f"actor_rollout_ref.model.path={model}", *extra]


def test_a_step_starts_from_the_saved_adapter_weights(tmp_path, tiny_gpt2, monkeypatch):
    saved = save_adapter(tiny_gpt2, tmp_path / "adapter", rank=4, alpha=8.0, targets=("c_attn", "c_fc"))
    import verl.workers.actor as actor_module

    started = {}
    real_apply = actor_module.apply_lora

    def recording_apply(model, lora_cfg):  # the actor's adapters as loaded, before any update
        wrapped = real_apply(model, lora_cfg)
        started.update(_lora_state(wrapped))
        return wrapped

    monkeypatch.setattr(actor_module, "apply_lora", recording_apply)
    out = tmp_path / "out"
    # real verl's lora_rank / lora_alpha are not read with an adapter (PeftModel.from_pretrained): noted, not used
    line = _real_line(tmp_path, tiny_gpt2, [f"actor_rollout_ref.model.lora_adapter_path={tmp_path}/adapter",
                                            "actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=64",
                                            "actor_rollout_ref.actor.optim.lr=1e-3", f"trainer.default_local_dir={out}"])
    tr = translate(line)
    assert tr.values["model.lora.adapter_path"] == str(tmp_path / "adapter")
    assert "model.lora.rank" not in tr.values and "model.lora.alpha" not in tr.values
    assert any(n.startswith("ignored actor_rollout_ref.model.lora_rank=32: the adapter's own settings") for n in tr.notes)
    assert main(line) == 0
    assert set(started) == set(saved) and len(saved) == 8  # A and B of c_attn and c_fc, 2 layers
    for name, tensor in saved.items():
        assert torch.equal(started[name], tensor.float()), name
    assert (out / "metrics.jsonl").exists()


def test_real_verl_missing_adapter_folder_is_one_line_exit_2(tmp_path, tiny_gpt2, capsys):
    rc = main(_real_line(tmp_path, tiny_gpt2, ["actor_rollout_ref.model.lora_adapter_path=/path/saved/lora_adapter",
                                               f"trainer.default_local_dir={tmp_path}/out"]))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: model.lora.adapter_path: LoRA adapter folder "
                                          "'/path/saved/lora_adapter' not found"), err[-1]
    assert "actor_rollout_ref.model.lora_adapter_path=/path/saved/lora_adapter" in err[-1]  # the real key, named
    with pytest.raises(ConfigError):
        load_translated(translate(_real_line(tmp_path, tiny_gpt2, [
            "actor_rollout_ref.model.lora_adapter_path=/path/saved/lora_adapter"])))


# ---------------------------------------------------------------------------- Megatron's lora section

MEGATRON = ["--config-name=ppo_megatron_trainer"]
L = "actor_rollout_ref.model.lora"


def test_megatron_lora_maps_onto_peft(tmp_path, tiny_gpt2):
    tr = translate(MEGATRON + _real_line(tmp_path, tiny_gpt2, [f"{L}.rank=8", f"{L}.alpha=16",
                                                                f"{L}.lora_A_init_method=kaiming", f"{L}.merge=True"]))
    lora = load_translated(tr).model.lora
    # alpha 16 / rank 8: Megatron's scale alpha / dim is peft's lora_alpha / r; dropout: real verl's default 0
    assert (lora.rank, lora.alpha, lora.dropout, lora.init_lora_weights) == (8, 16.0, 0.0, "kaiming")
    # Megatron's default targets linear_qkv, linear_proj, linear_fc1, linear_fc2 -> each family's projections
    assert lora.target_modules == ["q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn", "o_proj", "attn.c_proj",
                                   "gate_proj", "up_proj", "gate_up_proj", "c_fc", "down_proj", "mlp.c_proj"]
    assert any(n.startswith(f"{L}.type=lora: Megatron-Bridge's adapter on its fused linear_qkv and linear_fc1 shares "
                            "one A") for n in tr.notes)
    assert any(n.startswith(f"ignored {L}.merge=True: the rollout engine always gets the merged weights")
               for n in tr.notes)
    # alpha not given: Megatron's default 32 (not the FSDP engine's lora_alpha 16)
    canonical = load_translated(translate(MEGATRON + _real_line(tmp_path, tiny_gpt2, [
        f"{L}.rank=4", f"{L}.lora_A_init_method=kaiming", f"{L}.type=canonical_lora",
        f"{L}.target_modules=['linear_q','linear_v','linear_fc1_up']"]))).model.lora
    assert (canonical.alpha, canonical.target_modules) == (32.0, ["q_proj", "v_proj", "up_proj"])


def test_megatron_lora_trains_a_step_on_every_gpt2_linear(tmp_path, tiny_gpt2, monkeypatch):
    import verl.workers.actor as actor_module

    adapted = []
    real_apply = actor_module.apply_lora

    def recording_apply(model, lora_cfg):
        wrapped = real_apply(model, lora_cfg)
        adapted.extend(sorted({n.split(".lora_A")[0].rsplit(".", 2)[-2] + "." + n.split(".lora_A")[0].rsplit(".", 1)[-1]
                               for n, _ in wrapped.named_parameters() if ".lora_A." in n}))
        return wrapped

    monkeypatch.setattr(actor_module, "apply_lora", recording_apply)
    out = tmp_path / "out"
    assert main(MEGATRON + _real_line(tmp_path, tiny_gpt2, [f"{L}.rank=4", f"{L}.alpha=8",
                                                             f"{L}.lora_A_init_method=kaiming",
                                                             f"trainer.default_local_dir={out}"])) == 0
    # GPT-2's four linears per block: attention's fused qkv and output, the MLP's two
    assert adapted == ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]


@pytest.mark.parametrize("arg, line", [
    # real verl's default A init (xavier) has no peft equivalent: refused whenever lora.rank > 0 leaves it
    (f"{L}.rank=8", f"real verl's {L}.lora_A_init_method=xavier is not supported: Megatron-Bridge's xavier "
                    "initialisation of A has no peft equivalent"),
    (f"{L}.type=dora", f"real verl's {L}.type=dora is not supported"),
    (f"{L}.target_modules=['linear_qkv','router']", f"real verl's {L}.target_modules=['linear_qkv', 'router'] is not "
                                                    "supported: Megatron module names with no Hugging Face "
                                                    "equivalent here (router)"),
    (f"{L}.dropout_position=post", f"real verl's {L}.dropout_position=post is not supported"),
    (f"{L}.lora_B_init_method=kaiming", f"real verl's {L}.lora_B_init_method=kaiming is not supported"),
])
def test_megatron_lora_refusals_are_one_line(arg, line, tmp_path, tiny_gpt2):
    extra = [f"{L}.rank=8", arg] + ([] if arg == f"{L}.rank=8" else [f"{L}.lora_A_init_method=kaiming"])
    with pytest.raises(ConfigError, match="^" + re.escape(line)):
        load_translated(translate(MEGATRON + _real_line(tmp_path, tiny_gpt2, extra)))


def test_megatron_lora_rank_needs_the_megatron_engine(tmp_path, tiny_gpt2):
    with pytest.raises(ConfigError, match=rf"^real verl's {L}.rank is read by its Megatron engine only \(its FSDP "
                                          r"engine reads actor_rollout_ref.model.lora_rank\)"):
        translate(_real_line(tmp_path, tiny_gpt2, [f"{L}.rank=8", f"{L}.lora_A_init_method=kaiming"]))
    assert "model.lora.rank" not in translate(_real_line(tmp_path, tiny_gpt2, [f"{L}.rank=0"])).values


@pytest.mark.parametrize("init", ["kaiming", "gaussian"])
def test_init_lora_weights_starts_a_as_peft_does(init, tiny_gpt2):
    from transformers import AutoModelForCausalLM

    from verl.models.lora import apply_lora

    lora = config_from_dict({"model": {"lora": {"rank": 8, "target_modules": ["c_attn"],
                                                "init_lora_weights": init}}}).model.lora
    torch.manual_seed(0)
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_gpt2), lora)
    a = torch.cat([p.detach().flatten() for n, p in model.named_parameters() if ".lora_A." in n])
    b = torch.cat([p.detach().flatten() for n, p in model.named_parameters() if ".lora_B." in n])
    assert torch.count_nonzero(b) == 0  # B starts at zero either way: the model starts as the base
    fan_in = a.numel() // (8 * 2)  # A is (r, fan_in) in each of 2 layers
    if init == "gaussian":  # peft's gaussian: normal with std 1 / r = 0.125
        assert a.std().item() == pytest.approx(1 / 8, rel=0.05)
    else:  # kaiming-uniform with a = sqrt(5): uniform on +-1 / sqrt(fan_in), std 1 / sqrt(3 fan_in)
        assert a.abs().max().item() <= 1 / fan_in ** 0.5
        assert a.std().item() == pytest.approx(1 / (3 * fan_in) ** 0.5, rel=0.05)
