"""The workers' shared update loop (verl.workers.update_loop): the out-of-memory retry with
halved micro-batches, and the micro-batching value it runs on."""

import logging

import pytest
import torch

from verl.batch import Batch
from verl.workers.micro_batches import MicroBatching, make_micro_batches


def _actor(tiny_qwen2, micro):
    from verl.config import config_from_dict
    from verl.workers.actor import Actor

    cfg = config_from_dict({
        "device": "cpu", "model": {"name": tiny_qwen2},
        "algorithm": {"name": "grpo", "use_kl_loss": False},
        "rollout": {"n": 2, "max_new_tokens": 6},
        "training": {"batch_size": 4, "mini_batch_size": 8, "micro_batch_size": micro, "lr": 1e-3},
        "logging": {"backends": [], "progress_bar": False},
    })
    torch.manual_seed(0)
    return Actor.from_config(cfg, torch.device("cpu"))


def _batch(vocab, rows=8):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, 10), generator=gen)
    mask = torch.ones(rows, 10, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded prompt
    mask[1, 8:] = 0  # a short response
    resp_mask = mask[:, 4:].float()
    adv = torch.linspace(-1, 1, rows)[:, None].expand(rows, 6) * resp_mask
    return Batch(input_ids=ids * mask, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0),
                 responses=(ids * mask)[:, 4:], response_mask=resp_mask, advantages=adv.contiguous())


def _fail_forward(monkeypatch, actor, failing_calls):
    """actor._forward raises torch.OutOfMemoryError on the given call numbers (1-based)."""
    real, calls = actor._forward, []

    def forward(mb, with_entropy):
        calls.append(len(mb))
        if len(calls) in failing_calls:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return real(mb, with_entropy)

    monkeypatch.setattr(actor, "_forward", forward)
    return calls


def test_out_of_memory_redoes_the_mini_batch_with_halved_micro_batches(tiny_qwen2, monkeypatch, caplog):
    """The second micro-batch of 4 runs out of memory after the first one's backward: its
    gradients are dropped and the mini-batch is redone in micro-batches of 2, so the update is
    the one of micro-batches of 2 from the start (the same micro-batches and operations; only
    float rounding may differ). pi_old kept from the update's first forward is that of the
    redone pass, whole and in row order."""
    ref = _actor(tiny_qwen2, micro=2)
    want_batch = _batch(ref.model.config.vocab_size)  # old_log_probs None: kept from the update
    want, want_pi_old = ref.update_taking_pi_old(want_batch)

    actor = _actor(tiny_qwen2, micro=4)
    calls = _fail_forward(monkeypatch, actor, failing_calls={2})
    batch = _batch(actor.model.config.vocab_size)
    with caplog.at_level(logging.WARNING, logger="verl.workers.update_loop"):
        got, got_pi_old = actor.update_taking_pi_old(batch)
    assert calls == [4, 4, 2, 2, 2, 2]
    assert got["actor/oom_retries"] == 1 and want["actor/oom_retries"] == 0
    # 8 rows in micro-batches of 2: 4 passes; the failed attempt (4 + 4 rows) is not counted
    assert got["actor/micro_batches"] == 4 and want["actor/micro_batches"] == 4
    assert "out of memory in a micro-batch (4 sequences); redoing the mini-batch with 2 sequences" in caplog.text
    assert actor.micro == MicroBatching(2)  # later passes keep the smaller micro-batches
    for p, q in zip(actor.model.parameters(), ref.model.parameters()):
        assert torch.allclose(p, q, atol=1e-6, rtol=0)
    assert batch.old_log_probs is None  # the record holds them; the batch is not written
    assert got_pi_old.log_probs.shape == (8, 6)
    assert torch.allclose(got_pi_old.log_probs, want_pi_old.log_probs, atol=1e-6, rtol=0)
    assert torch.allclose(got_pi_old.entropy, want_pi_old.entropy, atol=1e-6, rtol=0)
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key


def test_a_second_out_of_memory_raises_naming_the_settings(tiny_qwen2, monkeypatch):
    actor = _actor(tiny_qwen2, micro=4)
    before = [p.detach().clone() for p in actor.model.parameters()]
    _fail_forward(monkeypatch, actor, failing_calls={1, 2})
    with pytest.raises(torch.OutOfMemoryError) as info:
        actor.update(_batch(actor.model.config.vocab_size))
    message = str(info.value)
    assert "\n" not in message and message.startswith("out of memory in the update with micro-batches of 2 sequences")
    for key in ("training.micro_batch_size", "training.max_tokens_per_micro_batch",
                "model.enable_gradient_checkpointing"):
        assert key in message
    assert all(torch.equal(a, p) for a, p in zip(before, actor.model.parameters()))  # no step was taken
    assert all(p.grad is None for p in actor.model.parameters())


def test_micro_batching_splits_like_make_micro_batches_and_halves():
    mask = torch.ones(6, 8, dtype=torch.long)
    mask[:3, :2] = 0
    batch = Batch(input_ids=torch.ones(6, 8, dtype=torch.long), attention_mask=mask,
                  position_ids=torch.zeros(6, 8, dtype=torch.long), responses=torch.ones(6, 4, dtype=torch.long),
                  response_mask=torch.ones(6, 4))
    for micro in (MicroBatching(4), MicroBatching(4, 14), MicroBatching(4, 14, packed=True)):
        got = [len(mb) for mb in micro.split(batch)]
        assert got == [len(mb) for mb in make_micro_batches(batch, micro.size, micro.max_tokens, micro.packed)]
        assert micro.count(batch) == len(got)
    # Rows of 6 real tokens (0-2) and 8 (3-5). Padded, a group costs rows x its longest row: two
    # 6-token rows 12, a 6 and an 8 16, two 8s 16 > 14; packed, the sum: 6 + 8 = 14 fits.
    assert [len(mb) for mb in MicroBatching(4).split(batch)] == [4, 2]
    assert [len(mb) for mb in MicroBatching(4, 14).split(batch)] == [2, 1, 1, 1, 1]
    assert [len(mb) for mb in MicroBatching(4, 14, packed=True).split(batch)] == [2, 2, 1, 1]
    assert MicroBatching(4).halved() == MicroBatching(2)
    assert MicroBatching(4, 14, packed=True).halved() == MicroBatching(4, 7, packed=True)  # the budget halves
    assert MicroBatching(1).halved() == MicroBatching(1)  # nothing left to shrink: no retry
    assert MicroBatching.from_training(type("T", (), dict(micro_batch_size=3, max_tokens_per_micro_batch=None,
                                                          use_packed_samples=True, packed_by_default=False))) \
        == MicroBatching(3, None, True)
