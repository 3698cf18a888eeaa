"""LoRA: only adapters train, the reference is the base model with adapters disabled (no
second copy), and merged weights equal peft's own merge."""

import copy

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.models.lora import adapters_disabled, apply_lora, merged_state_items, save_merged
from verl.workers.logprobs import response_log_probs


def _perturb_adapters(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)


def _lora_cfg(rank=4, alpha=8.0, targets="all-linear"):
    from verl.config import LoraConfig

    return LoraConfig(rank=rank, alpha=alpha, target_modules=targets)


def _batch(vocab, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (3, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0) * mask
    return ids, mask, pos


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_reference_is_base_model_with_adapters_disabled(tmp_path, arch, request):
    from transformers import AutoModelForCausalLM

    path = request.getfixturevalue(f"tiny_{arch}")
    cfg = load_config(None, small_overrides(tmp_path, **{"model.name": path, "model.lora.rank": 4,
                                                         "algorithm.name": "grpo"}))
    from verl.workers.actor import Actor
    from verl.workers.reference import Reference

    actor = Actor.from_config(cfg, torch.device("cpu"))
    n_params = sum(p.numel() for p in actor.model.parameters())
    ref = Reference.from_config(cfg, torch.device("cpu"), actor.model)
    assert ref.model is actor.model  # no second copy
    assert sum(p.numel() for p in ref.model.parameters()) == n_params
    trainable = {n for n, p in actor.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert all(p.dtype == torch.float32 for p in actor.model.parameters() if p.requires_grad)

    _perturb_adapters(actor.model)  # as if trained: the actor now differs from its base
    base = AutoModelForCausalLM.from_pretrained(path)
    ids, mask, pos = _batch(base.config.vocab_size)
    with torch.no_grad():
        want = response_log_probs(base, ids, mask, pos, 6)[0]
        with adapters_disabled(actor.model):
            got = response_log_probs(actor.model, ids, mask, pos, 6)[0]
        trained = response_log_probs(actor.model, ids, mask, pos, 6)[0]
    # Disabled adapters: each LoRA layer runs its base layer's own linear, the base model's
    # computation (observed bitwise); 1e-5 is float32 rounding of log-probs ~1-10 to spare.
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(trained, want, atol=1e-3)
    # Adapters are back on after the reference pass.
    assert any(m.active_adapters for m in actor.model.modules() if hasattr(m, "lora_A"))

    from verl.batch import Batch

    batch = Batch(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -6:],
                  response_mask=mask[:, -6:].float())
    # The reference's own micro-batches and head chunks vs one call: float32 ulps of log-probs
    # ~1-10 (observed <= 2e-7). atol 1e-5.
    assert torch.allclose(ref.compute_log_probs(batch), want * batch.response_mask, atol=1e-5)


def test_merged_state_items_equal_peft_merge_and_save(tmp_path, tiny_llama):
    from transformers import AutoModelForCausalLM

    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_llama), _lora_cfg(targets="q_proj,v_proj,down_proj"))
    _perturb_adapters(model, seed=3)
    items = dict(merged_state_items(model))
    reference = copy.deepcopy(model).merge_and_unload()
    ref_state = reference.state_dict()
    # Same names (tied lm_head written once, as save_pretrained does) and values.
    assert set(items) <= set(ref_state)
    assert set(ref_state) - set(items) <= {"lm_head.weight"}
    for name, value in items.items():  # W + (alpha / r) B A in float32: an ulp or two of weights ~1
        assert torch.allclose(value, ref_state[name], atol=1e-6), name
    assert not any("lora" in n or "base_layer" in n for n in items)

    out = save_merged(model, None, str(tmp_path / "merged"))
    loaded = AutoModelForCausalLM.from_pretrained(out)
    ids, mask, pos = _batch(loaded.config.vocab_size)
    with torch.no_grad():  # merged weights vs base + adapter products: float32 ulps of logits ~10
        assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-4)
    assert type(model).__name__.startswith("Peft")  # the training model keeps its adapters


def test_grpo_step_with_lora_trains_only_adapters(tmp_path, tiny_qwen2):
    cfg = load_config(None, small_overrides(tmp_path, **{
        "model.name": "tiny:qwen2", "model.lora.rank": 8, "model.lora.alpha": 16, "algorithm.name": "grpo",
        "training.total_steps": 2, "training.batch_size": 2, "training.use_packed_samples": "true",
        "model.enable_gradient_checkpointing": "true"}))
    trainer = create_trainer(cfg)
    assert trainer.reference.model is trainer.actor.model
    before = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    metrics = trainer.step()
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start at B = 0: actor == reference
    changed = {n for n, p in trainer.actor.model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and all("lora_" in n for n in changed)
    assert any("lora_B" in n for n in changed)
    metrics = trainer.step()
    assert metrics["kl"] > 0  # the trained adapters move the policy away from the base
