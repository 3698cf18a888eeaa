"""Critic variants: another size with the same tokenizer, and a different tokenizer (BERT-style)."""

import dataclasses
import functools
import math

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.workers.actor import Actor
from verl.workers.text_critic import TextCritic, map_values_to_actor_tokens, response_char_ends


def test_offset_mapping_hand_example():
    # prompt "Hi. " (4 chars) + response "unbelievable day" split by the actor as
    # ["un", "believ", "able", " day"] -> response char ends [2, 8, 12, 16].
    # Critic tokens over "Hi. unbelievable day": [CLS](0,0) "hi"(0,2) "."(2,3) "unbeliev"(4,12)
    # "##able"(12,16)... here the critic splits the word differently: "unbeliev" + "##able" + "day".
    critic = [(0, 0), (0, 2), (2, 3), (4, 12), (12, 16), (17, 20), (0, 0)]
    idx = map_values_to_actor_tokens(critic, prompt_chars=4, token_ends=[2, 8, 12, 16], length=6)
    # actor token t starts at prompt_chars + ends[t-1]: 4, 6, 12, 16.
    # token 0 (char 4): last critic token ending <= 4 is "." (index 2)
    # token 1 (char 6): still "." -- "unbeliev" ends at 12
    # token 2 (char 12): "unbeliev" (4,12) ends at 12 -> index 3
    # token 3 (char 16): "##able" (12,16) ends at 16 -> index 4
    # positions 4, 5 are padding: repeat the last index
    assert idx == [2, 2, 3, 4, 4, 4]


def test_offset_mapping_falls_back_to_first_token():
    # No critic token ends before the response starts (empty prompt): use index 0 ([CLS]).
    assert map_values_to_actor_tokens([(0, 0), (0, 3)], prompt_chars=0, token_ends=[3], length=1) == [0]


def test_response_char_ends_with_real_tokenizers(tiny_gpt2, tiny_qwen2):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_gpt2)
    ids = tok("I love reinforcement learning")["input_ids"]
    text, ends = response_char_ends(tok, ids)
    assert text == "I love reinforcement learning"
    assert ends[-1] == len(text) and ends == sorted(ends)
    # each token's text is the slice between consecutive ends
    pieces = [text[(ends[i - 1] if i else 0):ends[i]] for i in range(len(ends))]
    assert "".join(pieces) == text and pieces[0] == "I"


def test_words_split_differently_by_the_two_tokenizers(tiny_gpt2):
    from transformers import AutoTokenizer

    from verl.models.tiny import tiny_model_path

    actor = AutoTokenizer.from_pretrained(tiny_gpt2)
    critic = AutoTokenizer.from_pretrained(tiny_model_path("bert"))
    text = "Tom buys unbelievable apples"
    assert actor.tokenize(text) != critic.tokenize(text)
    ids = actor(text)["input_ids"]
    _, ends = response_char_ends(actor, ids)
    enc = critic(text, return_offsets_mapping=True)
    idx = map_values_to_actor_tokens(enc["offset_mapping"], 0, ends, len(ids))
    # every mapped critic token ends at or before the start of its actor token
    starts = [0] + ends[:-1]
    for t, j in enumerate(idx):
        assert enc["offset_mapping"][j][1] <= starts[t]


@pytest.mark.parametrize("variant", ["bert", "smaller_same_tokenizer"])
def test_ppo_steps_with_critic_variant(tmp_path, tiny_qwen2, variant):
    from verl.models.tiny import build_tiny_model, tiny_model_path

    if variant == "bert":
        critic_name = tiny_model_path("bert")
    else:
        # a narrower, shallower qwen2 with the same tokenizer as the actor
        critic_name = build_tiny_model("qwen2", str(tmp_path / "small_critic"), hidden=32, layers=1,
                                       pretrain_steps=0)
    cfg = load_config(None, small_overrides(tmp_path, **{"model.name": "tiny:qwen2", "critic.name": critic_name}))
    trainer = create_trainer(cfg)
    assert isinstance(trainer.critic, TextCritic) == (variant == "bert")
    before = {n: p.detach().clone() for n, p in trainer.critic.model.named_parameters()}
    for _ in range(2):
        m = trainer.step()
        assert math.isfinite(m["vf_loss"]) and math.isfinite(m["critic/explained_var"])
    changed = [n for n, p in trainer.critic.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert "value_head.weight" in changed and len(changed) > len(before) // 2


# ---------------------------------------------------------------------------
# critic.share_actor: a value head on the actor's trunk
# ---------------------------------------------------------------------------


def _shared_trainer(tmp_path, tag="shared", **extra):
    over = {"model.name": "tiny:qwen2", "critic.share_actor": "true", "checkpoint.save_dir": str(tmp_path / tag)}
    over.update(extra)
    return create_trainer(load_config(None, small_overrides(tmp_path, **over)))


def _experience(trainer):
    """One step's batch up to the advantages, as Trainer.algorithm_step builds it."""
    batch, _ = trainer.rollout_stage.run(trainer.train_data.next_batch(), trainer.global_step)
    batch.old_log_probs, _ = trainer.actor.compute_log_probs(batch)
    if trainer.reference is not None:
        batch.ref_log_probs = trainer.reference.compute_log_probs(batch)
    batch.values = trainer.critic.compute_values(batch)
    return trainer.compute_advantages(batch)


def test_shared_critic_ppo_steps(tmp_path, tiny_qwen2):
    from verl.workers.shared_critic import SharedCritic

    trainer = _shared_trainer(tmp_path)
    assert isinstance(trainer.critic, SharedCritic)
    hidden = trainer.actor.model.config.hidden_size
    # No second backbone: the critic's own parameters are the head's H weights and 1 bias.
    assert sum(p.numel() for p in trainer.critic.model.parameters()) == hidden + 1
    head_before = {n: p.detach().clone() for n, p in trainer.critic.model.named_parameters()}
    actor_before = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    for _ in range(2):
        m = trainer.step()
        for key in ("vf_loss", "critic/explained_var", "critic/grad_norm", "critic/vpred_mean", "pg_loss"):
            assert math.isfinite(m[key]), key
        assert m["vf_loss"] > 0 and m["critic/nonfinite_updates"] == 0
    assert all(not torch.equal(head_before[n], p) for n, p in trainer.critic.model.named_parameters())
    changed = [n for n, p in trainer.actor.model.named_parameters() if not torch.equal(actor_before[n], p)]
    assert len(changed) == len(actor_before)
    # The saved actor is a plain causal LM: the value head is not part of it.
    from safetensors import safe_open

    with safe_open(str(tmp_path / "shared" / "model.safetensors"), "pt") as f:
        assert not any("value" in k for k in f.keys())


def test_shared_values_are_the_head_on_the_lm_head_inputs(tmp_path, tiny_qwen2):
    """V(s_t) = w . h_t + b with h_t the trunk's last hidden state at the position that
    predicts response token t: for a row of width T with R response columns, positions
    T-R-1 .. T-2. Padded and packed forwards agree."""
    trainer = _shared_trainer(tmp_path)
    batch = _experience(trainer)
    values = trainer.critic.compute_values(batch)
    model, head = trainer.actor.model, trainer.critic.model
    t, r = batch.input_ids.shape[1], batch.response_length
    with torch.no_grad():
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=batch.position_ids, output_hidden_states=True)
        hidden = out.hidden_states[-1][:, t - r - 1:t - 1]  # (B, R, H)
        manual = head(hidden).squeeze(-1) * batch.response_mask
    # Two paths (the whole model with output_hidden_states vs the critic's trunk pass per
    # micro-batch; packed below): float32 values |V| < 1 off by a few ulps of the 64-term
    # head dot product and of the trunk (observed <= 1e-7). atol 1e-5.
    assert torch.allclose(values, manual, atol=1e-5)
    trainer.actor.micro = dataclasses.replace(trainer.actor.micro, packed=True)
    from verl.workers.packing import causal_lm_trunk, prepare_packing

    trainer.actor.packing_mode = prepare_packing(causal_lm_trunk(model))
    assert torch.allclose(trainer.critic.compute_values(batch), values, atol=1e-5)


def test_shared_loss_is_policy_plus_vf_coef_times_value(tmp_path, monkeypatch, tiny_qwen2):
    """One combined backward: grad(L_pg + c * L_vf) = grad(L_pg) + c * grad(L_vf). With the
    head attached at c = 0.5 and c = 1.0 and detached (policy loss only), the trunk's
    gradients satisfy g(0.5) - g_pg = 0.5 * (g(1.0) - g_pg), and g(1) != g_pg (the value
    loss reaches the trunk)."""
    trainer = _shared_trainer(tmp_path)
    batch = _experience(trainer)
    actor = trainer.actor
    counts = dict(num_tokens=float(batch.response_mask.sum()), num_seqs=len(batch),
                  max_response_len=trainer.config.rollout.max_new_tokens)

    def trunk_grads(vf_coef, attached=True):
        actor.model.zero_grad(set_to_none=True)
        trainer.critic.model.zero_grad(set_to_none=True)
        actor.vf_coef = vf_coef
        micro_loss = actor._micro_loss if attached else functools.partial(Actor._micro_loss, actor)
        micro_loss(batch, counts).loss.backward()
        return [p.grad.clone() for p in actor.model.parameters() if p.grad is not None]

    g_pg, g_half, g_one = trunk_grads(0.0, attached=False), trunk_grads(0.5), trunk_grads(1.0)
    assert len(g_pg) == len(g_half) == len(g_one) > 0
    # Three backward passes (another graph each): b - a and 0.5 (c - a) are differences of float32
    # gradients, each off by ulps of the gradient itself (not of the small difference), a few dozen
    # roundings along the backward: observed <= 1.8e-7 against value-loss parts up to 3e-3. atol 1e-6.
    for a, b, c in zip(g_pg, g_half, g_one):
        assert torch.allclose(b - a, 0.5 * (c - a), atol=1e-6, rtol=1e-4)
    assert any(not torch.allclose(a, c) for a, c in zip(g_pg, g_one))


def test_shared_critic_warmup_trains_only_the_head(tmp_path, tiny_qwen2):
    """critic_warmup = 1: step 1 changes the head but not one actor weight (the trunk is the
    policy's); step 2 trains both."""
    trainer = _shared_trainer(tmp_path, **{"algorithm.critic_warmup": 1})
    actor_before = {n: p.detach().clone() for n, p in trainer.actor.model.named_parameters()}
    head_before = trainer.critic.model.weight.detach().clone()
    m = trainer.step()
    assert all(torch.equal(actor_before[n], p) for n, p in trainer.actor.model.named_parameters())
    assert not torch.equal(head_before, trainer.critic.model.weight) and math.isfinite(m["vf_loss"])
    assert "pg_loss" not in m or m["pg_loss"] == 0
    trainer.step()
    assert not all(torch.equal(actor_before[n], p) for n, p in trainer.actor.model.named_parameters())
    assert trainer.critic.steps_taken == 2


def test_shared_critic_resume_equals_uninterrupted(tmp_path, tiny_qwen2):
    """2 steps straight == 1 step, full checkpoint, new trainer resumes, 1 step: actor, head.
    The same computation either way (in practice bitwise); 1e-6 as docs/reliability.md states."""
    extra = {"training.total_steps": 2, "checkpoint.save_full_every": 1, "checkpoint.keep_last": 3}
    a = _shared_trainer(tmp_path, "a", **extra)
    a.train()
    ckpt = str(tmp_path / "a" / "checkpoints" / "step_000001")
    b = _shared_trainer(tmp_path, "b", **extra, **{"checkpoint.resume": ckpt})
    assert b.global_step == 1 and b.critic.steps_taken == 1
    b.train()
    for (n, pa), pb in zip(a.actor.model.named_parameters(), b.actor.model.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6, rtol=0), n
    assert torch.allclose(a.critic.model.weight, b.critic.model.weight, atol=1e-6, rtol=0)


def test_no_grad_passes_build_no_graph(tmp_path, tiny_qwen2):
    """compute_log_probs / compute_values run without autograd (no graph kept alive)."""
    trainer = _shared_trainer(tmp_path)
    batch = _experience(trainer)
    lp, ent = trainer.actor.compute_log_probs(batch)
    values = trainer.critic.compute_values(batch)
    assert not lp.requires_grad and not ent.requires_grad and not values.requires_grad
