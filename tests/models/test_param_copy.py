"""model.mixed_precision: param_copy -- forwards/backwards on a bf16 copy of float32 master
weights (verl.workers.param_copy): the copy's construction, float32 gradient folding, staleness
detection, and the actor/trainer contracts (ratio 1 at the first micro-step, KL 0 against the
reference at step 1, micro-batching and resume invariants)."""

import math

import pytest
import torch

from conftest import small_overrides
from verl import create_trainer, load_config
from verl.config import ConfigError
from verl.workers.param_copy import ParamCopy, cast_module_copy


def test_cast_copy_casts_parameters_keeps_buffers_and_ties(tiny_qwen2):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2)
    model.model.layers[0].mlp.up_proj.weight.requires_grad_(False)
    c = cast_module_copy(model, torch.device("cpu"), torch.bfloat16, trainable=True)
    assert all(p.dtype == torch.bfloat16 for p in c.parameters())
    # Rotary frequencies stay float32: bf16 would move positions (~0.4 rad at token 2000).
    assert c.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(c.model.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq)
    assert c.lm_head.weight is c.model.embed_tokens.weight  # tied stays tied
    assert not c.model.layers[0].mlp.up_proj.weight.requires_grad  # frozen stays frozen
    assert c.model.layers[0].mlp.down_proj.weight.requires_grad
    frozen = cast_module_copy(model, torch.device("cpu"), torch.bfloat16, trainable=False)
    assert not any(p.requires_grad for p in frozen.parameters())


def test_gradients_sum_in_float32_across_backward_passes():
    """y = w * x with w = 1 (exact in bf16), loss = y. Backward 1 with x = 256 gives dL/dw = 256,
    backward 2 with x = 1 gives 1. In bf16, 256 + 1 = 257 is not representable (8-bit
    significand: the neighbours of 256 are 256 and 258) and rounds to 256; folded into the
    float32 master gradient after each pass the sum is exactly 257. The copy's own gradient
    is freed after each fold."""
    master = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        master.weight.fill_(1.0)
    pc = ParamCopy(master, torch.bfloat16)
    for x in (256.0, 1.0):
        pc.synced()(torch.tensor([[x]], dtype=torch.bfloat16)).sum().backward()
        assert pc.module.weight.grad is None
    assert master.weight.grad.dtype == torch.float32
    assert master.weight.grad.item() == 257.0
    assert (torch.tensor(256.0, dtype=torch.bfloat16) + 1).item() == 256.0  # what bf16 would give


def test_copy_follows_in_place_writes_only_where_written():
    master = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    pc = ParamCopy(master, torch.bfloat16)
    copy = pc.synced()
    ptrs = [p.data_ptr() for p in copy.parameters()]
    for p, q in zip(master.parameters(), copy.parameters()):
        assert torch.equal(q, p.detach().to(torch.bfloat16))
    # An optimizer step (in place on the master) reaches the copy at the next use. The fused
    # AdamW kernel does not bump version counters: the watched optimizer marks the copy stale.
    opt = torch.optim.AdamW(master.parameters(), lr=0.1, fused=True)
    pc.watch(opt)
    master(torch.randn(5, 3)).sum().backward()
    opt.step()
    copy = pc.synced()
    for p, q in zip(master.parameters(), copy.parameters()):
        assert torch.equal(q, p.detach().to(torch.bfloat16))
    # Any in-place write bumps the written tensor's version: only that tensor is copied again.
    before = {n: q.detach().clone() for n, q in copy.named_parameters()}
    with torch.no_grad():
        master[1].bias.copy_(torch.tensor([7.0, -3.0]))
        copy[0].weight.add_(1.0)  # a stray write to the copy: kept, its master did not change
    copy = pc.synced()
    assert copy[1].bias.tolist() == [7.0, -3.0]
    assert torch.equal(copy[0].weight, before["0.weight"] + 1.0)
    # load_state_dict (checkpoint resume) writes every tensor in place: all are copied again.
    sd = {k: v.clone() for k, v in master.state_dict().items()}
    sd["1.weight"] = torch.full((2, 4), 0.5)
    master.load_state_dict(sd)
    copy = pc.synced()
    assert torch.equal(copy[1].weight, torch.full((2, 4), 0.5, dtype=torch.bfloat16))
    assert torch.equal(copy[0].weight, master[0].weight.detach().to(torch.bfloat16))
    assert [p.data_ptr() for p in copy.parameters()] == ptrs  # written in place, never reallocated
    with torch.no_grad():
        master[0].bias.data.fill_(5.0)  # through .data: no version bump, so invalidate() says so
    assert not torch.equal(pc.synced()[0].bias, torch.full((4,), 5.0, dtype=torch.bfloat16))
    pc.invalidate()
    assert torch.equal(pc.synced()[0].bias, torch.full((4,), 5.0, dtype=torch.bfloat16))
    master.eval()
    assert not pc.synced().training
    master[0].weight = torch.nn.Parameter(torch.zeros(4, 3))
    with pytest.raises(RuntimeError, match="param_copy"):
        pc.synced()


def _actor(tiny_qwen2, mode, micro=4, device="cpu", model_extra=None, **extra):
    from verl.config import config_from_dict
    from verl.workers.actor import Actor

    cfg = config_from_dict({
        "device": device, "model": {"name": tiny_qwen2, "dtype": "bfloat16", "mixed_precision": mode,
                  **(model_extra or {})},
        "algorithm": {"name": "grpo", "use_kl_loss": False},
        "rollout": {"n": 2, "max_new_tokens": 6},
        "training": {"batch_size": 2, "mini_batch_size": 4, "micro_batch_size": micro, "lr": 1e-3, **extra},
        "logging": {"backends": [], "progress_bar": False},
    })
    torch.manual_seed(0)
    return Actor.from_config(cfg, torch.device(device))


def _batch(vocab):
    from verl.batch import Batch

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (4, 10), generator=gen)
    mask = torch.ones(4, 10, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded prompt
    resp_mask = torch.ones(4, 6)
    resp_mask[1, 4:] = 0
    mask[1, 8:] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand(4, 6) * resp_mask
    return Batch(input_ids=ids * mask, attention_mask=mask, position_ids=pos, responses=(ids * mask)[:, 4:],
                 response_mask=resp_mask, advantages=adv.contiguous(), old_log_probs=torch.zeros(4, 6),
                 ref_log_probs=torch.zeros(4, 6))


def test_actor_update_on_the_copy(tiny_qwen2):
    """pi_old from compute_log_probs and the update's first forward run the same bf16 copy:
    ratio exactly 1 (ppo_kl 0, no clipping). The master stays float32 and moves; the copy
    follows it; the loss matches autocast's to bf16 precision."""
    actor = _actor(tiny_qwen2, "param_copy")
    assert actor.param_copy is not None and all(p.dtype == torch.float32 for p in actor.model.parameters())
    batch = _batch(actor.model.config.vocab_size)
    batch.old_log_probs, _ = actor.compute_log_probs(batch)
    before = [p.detach().clone() for p in actor.model.parameters()]
    m = actor.update(batch)
    # Exact: compute_log_probs and the update's first micro-step run the same ops on the same
    # bf16 copy over the same micro-batch (4 rows, one mini-batch, no shuffle): the same bits.
    assert m["actor/ppo_kl"] == 0.0 and m["actor/pg_clipfrac"] == 0.0
    assert all(p.dtype == torch.float32 for p in actor.model.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, actor.model.parameters()))
    assert all(p.grad is None for p in actor.param_copy.module.parameters())
    for p, q in zip(actor.model.parameters(), actor.forward_model().parameters()):
        assert torch.equal(q, p.detach().to(torch.bfloat16))
    ref = _actor(tiny_qwen2, "autocast")
    assert ref.param_copy is None
    b2 = _batch(ref.model.config.vocab_size)
    b2.old_log_probs, _ = ref.compute_log_probs(b2)
    m2 = ref.update(b2)
    # Two computations (a bf16 residual stream vs float32 activations under autocast): bf16
    # precision, 2^-8 per rounding compounded through 2 layers and the loss: 5%.
    assert math.isclose(m["actor/pg_loss"], m2["actor/pg_loss"], rel_tol=0.05, abs_tol=2e-3)
    assert math.isclose(m["actor/grad_norm"], m2["actor/grad_norm"], rel_tol=0.05)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("gpu_defaults", [False, True])
def test_actor_update_on_the_copy_cuda(tiny_qwen2, packed, gpu_defaults):
    """On the GPU (padded, and packed through the varlen kernel): a ratio of 1 at the first
    micro-step, float32 master weights that move, a copy that follows them.

    gpu_defaults False: model.torch_compile and training.logprob_keep_logits off, so
    compute_log_probs (no grad) and the update's forward (grad) launch the same eager kernels
    on the same bf16 copy: the same bits, ppo_kl exactly 0.
    gpu_defaults True: both left to their GPU default (on). The two passes then run different
    kernels: inductor compiles an inference graph and a training graph with different fusions,
    and the kept logits come from one (N, V) matmul where the no-grad pass runs per-chunk ones.
    Each log-prob then differs by bf16 rounding (2^-8 relative on logits of order 1, so ~1e-2
    at most per token), and so does their mean: |ppo_kl| < 0.02, and nothing clips (eps 0.2)."""
    off = {} if gpu_defaults else {"logprob_keep_logits": False}
    actor = _actor(tiny_qwen2, "param_copy", micro=2, device="cuda", use_packed_samples=packed,
                   max_tokens_per_micro_batch=24 if packed else None,
                   model_extra=None if gpu_defaults else {"torch_compile": False}, **off)
    assert actor.compiled.enabled == gpu_defaults
    batch = _batch(actor.model.config.vocab_size)
    batch.old_log_probs, _ = actor.compute_log_probs(batch)
    before = [p.detach().clone() for p in actor.model.parameters()]
    m = actor.update(batch)
    if gpu_defaults:
        assert abs(m["actor/ppo_kl"]) < 0.02 and m["actor/pg_clipfrac"] == 0.0
    else:
        assert m["actor/ppo_kl"] == 0.0
    assert math.isfinite(m["actor/grad_norm"]) and m["actor/grad_norm"] > 0
    assert all(p.dtype == torch.float32 and p.is_cuda for p in actor.model.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, actor.model.parameters()))
    for p, q in zip(actor.model.parameters(), actor.forward_model().parameters()):
        assert torch.equal(q, p.detach().to(torch.bfloat16))


def test_micro_batching_changes_nothing_but_rounding(tiny_qwen2, monkeypatch):
    """One micro-batch of 4 or four of 1: the float32 master gradients agree to bf16 rounding
    of each micro-batch's weight gradient (summed in float32 either way)."""
    from conftest import capture_first_grads

    grads = []
    for micro in (4, 1):
        captured = capture_first_grads(monkeypatch)
        actor = _actor(tiny_qwen2, "param_copy", micro=micro)
        batch = _batch(actor.model.config.vocab_size)
        batch.old_log_probs, _ = actor.compute_log_probs(batch)
        actor.update(batch)
        grads.append(captured["actor"])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        assert a.dtype == torch.float32
        assert torch.allclose(a, b, atol=2e-2 * float(a.abs().max()) + 1e-6, rtol=0.05)


def test_first_step_kl_to_reference_is_zero(tmp_path, tiny_qwen2):
    """With the copy, actor and reference compute with the same bf16 weights and float32
    buffers: the KL loss of step 1 is exactly 0 (under autocast it is not: float32
    residual stream against the reference's bf16 one). Exact, because it is one computation:
    the same forward code over the same micro-batches (one mini-batch, no shuffle), same shapes."""
    def kl(mode):
        over = {"model.name": tiny_qwen2, "model.dtype": "bfloat16", "model.mixed_precision": mode,
                "training.total_steps": 1, "algorithm.name": "grpo", "algorithm.use_kl_loss": "true",
                "algorithm.kl_loss_coef": 0.1, "rollout.max_new_tokens": 6,
                "checkpoint.save_dir": str(tmp_path / mode)}
        return create_trainer(load_config(None, small_overrides(tmp_path, **over))).step()["actor/kl_loss"]

    assert kl("param_copy") == 0.0
    assert kl("autocast") != 0.0


def test_resume_equals_uninterrupted_with_param_copy(tmp_path, tiny_qwen2):
    """2 steps straight == 1 step, full checkpoint, a new trainer resuming for step 2: the
    resumed copy is rebuilt from the loaded master weights. The same computation either way (in
    practice bitwise); 1e-6 as docs/reliability.md states."""
    over = {"model.name": tiny_qwen2, "model.dtype": "bfloat16", "model.mixed_precision": "param_copy",
            "training.total_steps": 2, "checkpoint.save_full_every": 1, "rollout.max_new_tokens": 4}
    a = create_trainer(load_config(None, small_overrides(tmp_path, **over, **{"checkpoint.save_dir": str(tmp_path / "a")})))
    a.train()
    ckpt = str(tmp_path / "a" / "checkpoints" / "step_000001")
    b = create_trainer(load_config(None, small_overrides(tmp_path, **over, **{"checkpoint.save_dir": str(tmp_path / "b"),
                                                                              "checkpoint.resume": ckpt})))
    assert b.global_step == 1
    b.train()
    for (name, p), q in zip(a.actor.model.named_parameters(), b.actor.model.parameters()):
        assert torch.allclose(p, q, atol=1e-6, rtol=0), name


def test_config_errors_name_the_key(tmp_path):
    for over, match in (({"model.mixed_precision": "param_copy"}, "model.dtype"),
                        ({"model.mixed_precision": "param_copy", "model.dtype": "bfloat16", "model.lora.rank": 4},
                         "lora"),
                        ({"model.mixed_precision": "fp8"}, "model.mixed_precision")):
        with pytest.raises(ConfigError, match=match):
            load_config(None, small_overrides(tmp_path, **over))
