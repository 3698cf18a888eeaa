"""Mixture-of-experts decoders (verl/models/moe.py, verl/workers/moe_forward.py) on the tiny random MoE models
(tiny:qwen2_moe, qwen3_moe, mixtral, olmoe: 4 experts, top-2): the routers found and restated exactly, the
router's load-balancing loss and expert load, routing replay, and the invariances -- packed equals padded,
micro-batch 1 equals 4, resume equals uninterrupted, replaying the trainer's own choices equals no replay."""

from __future__ import annotations

import json
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from conftest import capture_first_grads, small_overrides
from moe_helpers import padded_and_packed_log_probs
from verl import create_trainer, load_config
from verl.config import ConfigError
from verl.models.moe import MoeRouting, expert_load, load_metrics, route
from verl.models.tiny import MOE_ARCHS, tiny_model_path


@pytest.fixture(scope="module", params=MOE_ARCHS)
def moe_model(request):
    return request.param, AutoModelForCausalLM.from_pretrained(tiny_model_path(request.param)).eval()


def _inputs():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 400, (2, 7), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded row, as the rollout's
    return ids, mask


def test_the_routers_are_found_and_restated_exactly(moe_model):
    arch, model = moe_model
    routing = MoeRouting(model)
    assert len(routing.routers) == model.config.num_hidden_layers == 2
    assert (routing.num_experts, routing.top_k) == (4, 2)
    h = torch.randn(5, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    for router in routing.routers:  # the same operations in the same order: the same bits
        assert all(torch.equal(a, b) for a, b in zip(router(h), route(router, h, None))), arch
    assert not MoeRouting(AutoModelForCausalLM.from_pretrained(tiny_model_path("qwen2")))


def test_the_aux_loss_is_the_models_own(moe_model):
    arch, model = moe_model
    routing = MoeRouting(model)
    ids, mask = _inputs()
    with torch.no_grad(), routing.recording() as rec:
        out = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
    # transformers' MoE model adds router_aux_loss_coef x this to its loss: the same function, the same tokens
    assert float(routing.aux_loss(rec, mask)) == pytest.approx(float(out.aux_loss), rel=1e-6)
    assert [e.shape for e in rec.experts] == [(14, 2), (14, 2)]  # 2 x 7 positions, top-2, per layer


def test_expert_load_by_hand():
    # one layer, 4 experts; tokens routed to (0, 1), (0, 2) and a padding token to (3, 3), masked out:
    # slots 0, 1, 0, 2 -> shares 2/4, 1/4, 1/4, 0; the largest share over the mean 1/4 is 2
    experts = [torch.tensor([[0, 1], [0, 2], [3, 3]])]
    load = expert_load(experts, 4, torch.tensor([True, True, False]))
    assert load.tolist() == [[0.5, 0.25, 0.25, 0.0]]
    m = load_metrics(load)
    assert m["moe/load_max_over_mean"] == 2.0 and m["moe/expert_load/0"] == 0.5 and m["moe/expert_load/3"] == 0.0


def test_replaying_the_routers_own_choices_changes_nothing_and_other_choices_do(moe_model):
    arch, model = moe_model
    routing = MoeRouting(model)
    ids, mask = _inputs()
    with torch.no_grad():
        with routing.recording() as rec:
            own = model(input_ids=ids, attention_mask=mask).logits
        given = torch.stack(rec.experts, dim=1)  # (14, L, k)
        routing.replay(given)
        replayed = model(input_ids=ids, attention_mask=mask).logits
        routing.replay((given + 1) % 4)  # every token to other experts
        other = model(input_ids=ids, attention_mask=mask).logits
        half = given.clone()
        half[7:] = -1  # -1: the router's own choice
        routing.replay(half)
        mixed = model(input_ids=ids, attention_mask=mask).logits
        routing.replay(None)
        after = model(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(replayed, own, atol=1e-6, rtol=0) and torch.allclose(mixed, own, atol=1e-6, rtol=0)
    assert float((other - own).abs().max()) > 0.1
    assert torch.equal(after, own)


def test_the_router_gets_its_gradient_through_the_replayed_experts():
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path("qwen3_moe"))
    routing = MoeRouting(model)
    ids, mask = _inputs()
    with routing.recording() as rec:
        model(input_ids=ids, attention_mask=mask)
    routing.replay(torch.stack(rec.experts, dim=1))
    model(input_ids=ids, attention_mask=mask).logits.sum().backward()
    routing.replay(None)
    assert all(r.weight.grad is not None and float(r.weight.grad.abs().sum()) > 0 for r in routing.routers)


def _cfg(tmp_path, name, arch="qwen3_moe", **extra):
    over = {"model.name": f"tiny:{arch}", "rollout.name": "hf", "training.total_steps": 2, "training.batch_size": 4,
            "training.micro_batch_size": 4, "checkpoint.save_dir": str(tmp_path / name), **extra}
    return load_config(None, small_overrides(tmp_path, **over))


def test_packed_equals_padded_and_micro_batch_1_equals_4(tmp_path, monkeypatch):
    """The actor's log-probs of one batch with packed and padded micro-batches, and the first update's
    gradients with micro-batches of 1 and of 4 (no auxiliary loss: training.router_aux_loss_coef 0)."""
    trainer = create_trainer(_cfg(tmp_path, "p", **{"training.router_aux_loss_coef": 0.01}))
    batch = trainer.rollout.generate(trainer.train_data.next_batch(), trainer.sampling.for_step(1))
    padded, packed = padded_and_packed_log_probs(trainer, batch)
    mask = batch.response_mask.bool()
    # two paths (padded attention with a mask, packed varlen rows): float32 log-probs agree to a few ulps of the
    # attention sums; the routers see the same real tokens, so the same experts (atol 1e-5)
    assert torch.allclose(packed[mask], padded[mask], atol=1e-5, rtol=1e-5)

    grads = {}
    for micro in (1, 4):
        captured = capture_first_grads(monkeypatch)
        t = create_trainer(_cfg(tmp_path, f"m{micro}", **{"training.micro_batch_size": micro,
                                                           "training.total_steps": 1}))
        t.train()
        grads[micro] = captured["actor"]
    for a, b in zip(grads[1], grads[4]):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_resume_equals_uninterrupted(tmp_path):
    """2 steps, then a new trainer from that checkpoint to step 4, against 4 uninterrupted steps (with the
    auxiliary loss on): the same actor weights."""
    extra = {"training.total_steps": 4, "training.router_aux_loss_coef": 0.01, "checkpoint.save_full_every": 2}
    full = create_trainer(_cfg(tmp_path, "full", **extra))
    full.train()
    ckpt = os.path.join(tmp_path / "full", "checkpoints", "step_000002")
    resumed = create_trainer(_cfg(tmp_path, "resumed", **extra, **{"checkpoint.resume": ckpt}))
    assert resumed.global_step == 2  # it continues from the checkpoint: steps 3 and 4 only
    resumed.train()
    want = dict(full.actor.model.named_parameters())
    for name, p in resumed.actor.model.named_parameters():
        assert torch.allclose(p, want[name], atol=1e-6, rtol=0), name


def test_the_update_logs_expert_load_and_adds_the_aux_loss(tmp_path):
    trainer = create_trainer(_cfg(tmp_path, "aux", **{"training.router_aux_loss_coef": 0.01,
                                                        "training.total_steps": 1}))
    trainer.train()
    (row,) = [json.loads(line) for line in open(tmp_path / "aux" / "metrics.jsonl")]
    loads = [row[f"moe/expert_load/{e}"] for e in range(4)]
    assert sum(loads) == pytest.approx(1.0, abs=1e-6) and row["moe/load_max_over_mean"] >= 1.0
    assert row["moe/aux_loss"] > 0  # E x sum f_e P_e >= 1 for top-2 of 4 (f and P each sum to 1 over experts)


def test_engine_routing_is_recorded_and_replayed(tmp_path):
    """rollout.routing_replay: engine on the hf engine: the rollout batch carries each token's experts
    (B, P + R, L, k); the actor's log-probs routed to them equal its own (the same weights route alike), and
    routed elsewhere they differ."""
    trainer = create_trainer(_cfg(tmp_path, "eng", **{"rollout.routing_replay": "engine"}))
    batch = trainer.rollout.generate(trainer.train_data.next_batch(), trainer.sampling.for_step(1))
    routed = batch.routed_experts
    assert routed is not None and routed.shape[:2] == batch.input_ids.shape and routed.shape[2:] == (2, 2)
    # padding has none; every real position has one but the last column's (that token was never fed back)
    assert bool((routed[batch.attention_mask == 0] == -1).all())
    assert bool((routed[:, :-1][batch.attention_mask[:, :-1].bool()] >= 0).all())
    with_replay = trainer.actor.compute_log_probs(batch)[0]
    own = trainer.actor.compute_log_probs(batch.replace(routed_experts=None))[0]
    moved = trainer.actor.compute_log_probs(batch.replace(routed_experts=torch.where(routed >= 0, (routed + 1) % 4,
                                                                                      routed)))[0]
    mask = batch.response_mask.bool()
    assert torch.allclose(with_replay[mask], own[mask], atol=1e-5, rtol=0)
    assert float((moved[mask] - own[mask]).abs().max()) > 1e-2
    trainer.train()  # the update replays them: a step runs


def test_pi_old_routing_is_kept_for_the_update(tmp_path):
    """rollout.routing_replay: pi_old with two mini-batches (so pi_old has its own pass): the pass keeps the
    experts per token for the update."""
    trainer = create_trainer(_cfg(tmp_path, "r2", **{"rollout.routing_replay": "pi_old",
                                                       "training.mini_batch_size": 2, "training.micro_batch_size": 2}))
    batch = trainer.rollout.generate(trainer.train_data.next_batch(), trainer.sampling.for_step(1))
    trainer.actor.compute_old_log_probs(batch, may_defer=False)
    assert batch.routed_experts is not None and batch.routed_experts.shape[:2] == batch.input_ids.shape
    assert bool((batch.routed_experts[batch.attention_mask.bool()] >= 0).all())
    trainer.train()


def test_the_moe_keys_need_an_moe_model_and_the_hf_engine(tmp_path, tiny_gpt2):
    with pytest.raises(ConfigError, match="training.router_aux_loss_coef: for mixture-of-experts models"):
        create_trainer(load_config(None, small_overrides(tmp_path, **{"model.name": tiny_gpt2,
                                                                      "training.router_aux_loss_coef": 0.01})))
    load_config(None, ["rollout.name=vllm", "rollout.routing_replay=engine"])  # vLLM and SGLang record it (test_engine_routing)
    with pytest.raises(ConfigError, match="async_training.partial_rollout: the engine's routing"):
        load_config(None, ["rollout.name=vllm", "rollout.routing_replay=engine", "async_training.enable=true",
                           "async_training.partial_rollout=true"])


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_engines_get_the_experts_in_the_checkpoint_layout(arch, tmp_path):
    """What a weight sync sends (hf_named_weights) is what save_pretrained writes and engines load: one
    tensor per expert and projection, equal to the file's; the HF weight copy keeps the fused memory layout."""
    from safetensors.torch import load_file

    from verl.rollout.hf_weights import hf_named_weights

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(arch))
    tied = ({"lm_head.weight"} if model.get_output_embeddings().weight is model.get_input_embeddings().weight
            else set())  # sent once, as the embeddings
    sent = dict(hf_named_weights(model))
    model.save_pretrained(tmp_path)
    disk = load_file(os.path.join(tmp_path, "model.safetensors"))
    assert set(sent) == set(disk) - tied and any(".experts.3." in n for n in sent)
    assert all(torch.equal(sent[n], disk[n]) for n in sent)
    assert set(dict(hf_named_weights(model, checkpoint_layout=False))) == set(model.state_dict()) - tied
