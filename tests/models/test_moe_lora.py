"""LoRA on mixture-of-experts models: the experts and the routers adapted (peft's target_parameters, one
low-rank delta per expert on transformers 5's fused expert tensors), merged for the engines, replayed.

With `model.lora.target_modules: all-linear` every linear map is adapted, on an MoE model too: attention, the
shared expert, each routed expert's projections and the router. peft wraps a tensor parameter with a
`ParamWrapper` (nested when one module has two: `experts.base_layer.base_layer.down_proj` in the state dict),
which a merge must find by the tensor it adapts, not by a `.base_layer.weight` name. Checked for the four
families on the tiny random models, with the adapters' B set to random values so every delta is non-zero:
- the adapted set: attention, every expert tensor and every router (Qwen2-MoE's too, which peft's own
  conversion leaves out);
- the merged weights (merged_state_items) under the plain model's names, loaded into a plain model, give the
  peft model's logits (float32, 2 layers: within 2e-5; without the fused experts' deltas they differ by > 0.1);
- the sync stream in the checkpoint layout (one tensor per expert) equals the plain merged model's;
- replaying the (adapted) routers' own choices changes nothing; the experts' adapters get gradients;
- a trainer run with the HF engine's own weight copy keeps the engine on the actor: rollout/logprob_diff
  stays below 1e-4 after updates that moved the expert adapters;
- packed micro-batches equal padded ones, and a resume from a full-state checkpoint equals the uninterrupted run
  (the experts' adapters saved and restored).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from conftest import small_overrides
from moe_helpers import padded_and_packed_log_probs
from verl import create_trainer, load_config
from verl.config import ConfigError
from verl.models.lora import adapted_weights, apply_lora, merged_state_items
from verl.models.moe import MoeRouting
from verl.models.tiny import MOE_ARCHS, tiny_model_path
from verl.rollout.hf_weights import hf_named_weights


def lora_cfg(**over):
    base = dict(rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear", exclude_modules=None,
                init_lora_weights="kaiming", adapter_path=None, target_parameters="auto", fused=False)
    return SimpleNamespace(**{**base, **over})


def adapted_model(arch: str):
    """The tiny MoE with LoRA everywhere and random B (B starts at zero: no delta to check otherwise)."""
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_path(arch)), lora_cfg())
    gen = torch.Generator().manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.data = torch.randn(param.shape, generator=gen) * 0.1
    return model.eval()


def ids():
    return torch.randint(3, 400, (2, 7), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_all_linear_adapts_attention_every_expert_and_the_router(arch):
    model = adapted_model(arch)
    base = model.get_base_model()
    adapted = {name for name, p in base.named_parameters() if id(p) in adapted_weights(model)}
    layer0 = {n.split("layers.0.")[1] for n in adapted if "layers.0." in n}
    assert {"self_attn.q_proj.base_layer.weight", "self_attn.o_proj.base_layer.weight"} <= layer0
    fused = {n for n, p in base.named_parameters() if p.ndim == 3}
    assert fused and fused <= adapted  # gate_up_proj and down_proj of each layer's experts
    assert all(id(r.weight) in adapted_weights(model) for r in MoeRouting(base).routers)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_the_merged_weights_are_the_adapted_models(arch):
    model = adapted_model(arch)
    with torch.no_grad():
        expect = model(input_ids=ids()).logits
    merged = dict(merged_state_items(model))
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_path(arch)).eval()
    tied = {"lm_head.weight"} if plain.get_output_embeddings().weight is plain.get_input_embeddings().weight else set()
    assert set(merged) == set(plain.state_dict()) - tied  # no peft decoration left in a name
    with torch.no_grad():
        base_logits = plain(input_ids=ids()).logits
        plain.load_state_dict(merged, strict=False)
        got = plain(input_ids=ids()).logits
    assert float((got - expect).abs().max()) < 2e-5
    assert float((base_logits - expect).abs().max()) > 0.1  # the deltas matter at this scale
    # the stream an engine gets: the checkpoint layout (one tensor per expert) of the same merged weights
    sent, reference = dict(hf_named_weights(model)), dict(hf_named_weights(plain))
    assert set(sent) == set(reference) and any(".experts.3." in n for n in sent)
    assert all(torch.equal(sent[n], reference[n]) for n in sent)


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_replay_through_adapted_routers_and_expert_gradients(arch):
    model = adapted_model(arch)
    routing = MoeRouting(model.get_base_model())
    with torch.no_grad():
        with routing.recording() as rec:
            own = model(input_ids=ids()).logits
        routing.replay(torch.stack(rec.experts, dim=1))
        replayed = model(input_ids=ids()).logits
    assert torch.allclose(replayed, own, atol=1e-6, rtol=0)
    model.train()
    model(input_ids=ids()).logits.sum().backward()
    routing.replay(None)
    expert_grads = [p.grad for n, p in model.named_parameters() if "experts" in n and "lora_" in n]
    assert expert_grads and all(g is not None and float(g.abs().sum()) > 0 for g in expert_grads)


def test_experts_take_no_dropout_and_the_key_is_named():
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path("qwen3_moe"))
    with pytest.raises(ConfigError, match=r"model.lora.dropout: 0.1: LoRA on a mixture-of-experts"):
        apply_lora(model, lora_cfg(dropout=0.1))
    with pytest.raises(ConfigError, match=r"model.lora.target_parameters: 'experts'"):
        load_config(None, ["model.lora.rank=4", "model.lora.target_parameters=experts"])


def test_attention_only_leaves_the_experts_alone():
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_path("qwen3_moe")),
                       lora_cfg(target_modules="q_proj,k_proj,v_proj,o_proj", dropout=0.1))
    base = model.get_base_model()
    assert not any(p.ndim == 3 and id(p) in adapted_weights(model) for p in base.parameters())


def test_a_run_keeps_the_engine_on_the_adapted_actor(tmp_path):
    cfg = load_config(None, small_overrides(tmp_path, **{
        "model.name": "tiny:qwen3_moe", "model.lora.rank": 4, "model.lora.alpha": 8, "rollout.name": "hf",
        "rollout.hf_weight_copy": "true", "training.total_steps": 3, "training.lr": 1e-2}))
    trainer = create_trainer(cfg)
    try:
        diffs = [trainer.step()["rollout/logprob_diff"] for _ in range(3)]
        moved = [p for n, p in trainer.actor.model.named_parameters() if "experts" in n and "lora_B" in n]
        assert moved and all(float(p.detach().abs().max()) > 0 for p in moved)  # the expert adapters trained
    finally:
        trainer.run.close()
    assert max(diffs) < 1e-4, diffs


def _lora_cfg(tmp_path, name, **extra):
    over = {"model.name": "tiny:qwen3_moe", "model.lora.rank": 4, "model.lora.alpha": 8, "rollout.name": "hf",
            "training.total_steps": 2, "training.batch_size": 4, "training.micro_batch_size": 4, "training.lr": 1e-2,
            "checkpoint.save_dir": str(tmp_path / name), **extra}
    return load_config(None, small_overrides(tmp_path, **over))


def test_packed_equals_padded_with_adapted_experts(tmp_path):
    trainer = create_trainer(_lora_cfg(tmp_path, "p"))
    try:
        gen = torch.Generator().manual_seed(0)
        for name, param in trainer.actor.model.named_parameters():
            if "lora_B" in name:
                param.data = torch.randn(param.shape, generator=gen) * 0.1
        batch = trainer.rollout.generate(trainer.train_data.next_batch(), trainer.sampling.for_step(1))
        padded, packed = padded_and_packed_log_probs(trainer, batch)
    finally:
        trainer.run.close()
    mask = batch.response_mask.bool()
    assert torch.allclose(packed[mask], padded[mask], atol=1e-5, rtol=1e-5)  # as tests/models/test_moe.py


def test_resume_with_adapted_experts_equals_uninterrupted(tmp_path):
    """The experts' adapters (nested ParamWrappers) go into the full-state checkpoint and come back."""
    extra = {"training.total_steps": 4, "checkpoint.save_full_every": 2}
    full = create_trainer(_lora_cfg(tmp_path, "full", **extra))
    full.train()
    ckpt = tmp_path / "full" / "checkpoints" / "step_000002"
    resumed = create_trainer(_lora_cfg(tmp_path, "resumed", **extra, **{"checkpoint.resume": str(ckpt)}))
    assert resumed.global_step == 2  # it continues from the checkpoint: steps 3 and 4 only
    resumed.train()
    want = dict(full.actor.model.named_parameters())
    adapters = [n for n in want if "experts" in n and "lora_" in n]
    assert adapters and any(float(want[n].abs().max()) > 0 for n in adapters if "lora_B" in n)
    for name, p in resumed.actor.model.named_parameters():
        assert torch.allclose(p, want[name], atol=1e-6, rtol=0), name
