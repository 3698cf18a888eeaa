"""Workers own their training state: `state_dict()` / `load_state_dict()` of the actor, the
critic and the shared value head carry optimizer, schedule and mini-batch shuffler, so that
weights + state resume an update sequence exactly."""

import pytest
import torch

from verl.batch import Batch


def _config(tiny_qwen2, **critic):
    from verl.config import config_from_dict

    return config_from_dict({
        "device": "cpu", "model": {"name": tiny_qwen2}, "algorithm": {"name": "ppo"}, "critic": critic,
        "rollout": {"n": 2, "max_new_tokens": 6},
        # Two shuffled mini-batches a step and a warm-up schedule: the shuffler and the
        # scheduler matter as much as the AdamW moments.
        "training": {"batch_size": 4, "mini_batch_size": 4, "micro_batch_size": 2, "lr": 1e-3,
                     "warmup_steps": 3},
        "logging": {"backends": [], "progress_bar": False},
    })


def _batch(vocab, rows=8):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, 10), generator=gen)
    mask = torch.ones(rows, 10, dtype=torch.long)
    resp_mask = mask[:, 4:].float()
    return Batch(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1), responses=ids[:, 4:],
                 response_mask=resp_mask, advantages=torch.randn(rows, 6, generator=gen) * resp_mask,
                 old_log_probs=torch.zeros(rows, 6) - 3.0, values=torch.zeros(rows, 6),
                 returns=torch.randn(rows, 6, generator=gen))


def _build(kind, cfg):
    """-> (workers with state, the module whose weights a checkpoint keeps per worker)."""
    from verl.workers.actor import Actor
    from verl.workers.critic import Critic
    from verl.workers.shared_critic import SharedCritic

    torch.manual_seed(0)  # the same fresh value head each time
    device = torch.device("cpu")
    if kind == "actor":
        return [Actor.from_config(cfg, device)]
    if kind == "critic":
        return [Critic.from_config(cfg, device)]
    actor = Actor.from_config(cfg, device)
    return [actor, SharedCritic.from_config(cfg, actor)]


def _update(workers, batch):
    for w in reversed(workers):  # the trainer's order: critic, then actor
        w.update(batch)


def _weights(workers):
    return [p.detach().clone() for w in workers for p in w.model.parameters()]


@pytest.mark.parametrize("kind,critic", [("actor", {}), ("critic", {}), ("shared", {"share_actor": True})])
def test_weights_and_state_resume_the_updates_exactly(tiny_qwen2, kind, critic):
    cfg = _config(tiny_qwen2, **critic)
    batch = _batch(32)
    straight = _build(kind, cfg)
    _update(straight, batch)
    _update(straight, batch)

    first = _build(kind, cfg)
    _update(first, batch)
    saved = [(w.state_dict(), {k: v.clone() for k, v in w.model.state_dict().items()}) for w in first]
    assert set(saved[0][0]) == {"optimizer", "scheduler", "generator"}
    if kind == "shared":  # the head's own: its mini-batches are the actor's
        assert set(saved[1][0]) == {"optimizer", "scheduler"}

    def resumed(with_state: bool):
        workers = _build(kind, cfg)
        for w, (state, weights) in zip(workers, saved):
            w.model.load_state_dict(weights)
            if with_state:
                w.load_state_dict(state)
        _update(workers, batch)
        return _weights(workers)

    # One computation either way (the same weights, moments, learning rate and mini-batches).
    assert all(torch.equal(a, b) for a, b in zip(_weights(straight), resumed(with_state=True)))
    # Weights alone do not resume it: fresh moments, schedule and shuffler give another update.
    assert not all(torch.equal(a, b) for a, b in zip(_weights(straight), resumed(with_state=False)))
