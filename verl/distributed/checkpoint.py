"""Full-state checkpoints of a distributed run (the counterparts of
verl.checkpoint.full_state.write_full_state / restore_full_state for `distributed.backend: ray`).

Layout of a full checkpoint folder (inside CheckpointManager's atomic temp folder):

    actor/                     Hugging Face folder with the gathered weights (deployment)
    shards/actor/              torch.distributed.checkpoint: __<rank>_0.distcp per rank + .metadata,
                               extra_state.pt (LR scheduler, mini-batch shuffler)
    shards/critic/             the same for the critic (PPO)
    rng.pt                     the driver's RNG state (it samples the rollouts)
    trainer_state.json         step, data position, KL controller, counters, config

Every rank writes its own shard files, so the folder must be on a filesystem all nodes
see. Weights and optimizer moments stay sharded on disk: saving never gathers the optimizer
into one process, and a checkpoint loads into any number of ranks (DCP reshards). A
single-process checkpoint and a sharded one are not interchangeable.
"""

from __future__ import annotations

import os

from verl.checkpoint.durable_files import CheckpointError, atomic_write_json, load_torch, save_torch
from verl.checkpoint.full_state import (RunState, read_trainer_state, require_full, restore_trainer_state,
                                        trainer_state, write_actor)
from verl.checkpoint.rng_state import capture_rng, restore_rng


def write_full_state(rs: RunState, folder: str, reason: str = "periodic") -> dict:
    write_actor(rs, folder)  # gathers the weights into the driver's copy first
    rs.actor.save_checkpoint(os.path.join(folder, "shards", "actor"))
    if rs.critic is not None:
        rs.critic.save_checkpoint(os.path.join(folder, "shards", "critic"))
    save_torch(capture_rng({}), os.path.join(folder, "rng.pt"))
    state = trainer_state(rs, reason)
    atomic_write_json(os.path.join(folder, "trainer_state.json"), state)
    return {"reason": reason, "global_step": state["global_step"], "sharded": True}


def restore_full_state(rs: RunState, path: str) -> dict:
    require_full(path)
    if not os.path.isdir(os.path.join(path, "shards", "actor")):
        raise CheckpointError(f"{path}: written by a single-process run (no shards/); resume it with "
                              "distributed.backend: none")
    has_critic = os.path.isdir(os.path.join(path, "shards", "critic"))
    if (rs.critic is not None) != has_critic:
        raise CheckpointError(f"{path}: the checkpoint {'has' if has_critic else 'has no'} critic but this run "
                              f"{'has none' if rs.critic is None else 'needs one'}")
    state = read_trainer_state(path)
    rs.actor.load_checkpoint(os.path.join(path, "shards", "actor"))
    if rs.critic is not None:
        rs.critic.load_checkpoint(os.path.join(path, "shards", "critic"))
    restore_trainer_state(rs, state)
    restore_rng(load_torch(os.path.join(path, "rng.pt")), {})
    rs.rollout.sync_weights(rs.actor.model)  # no stale weights in the generation engine
    return state
