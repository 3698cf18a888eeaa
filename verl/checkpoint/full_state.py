"""The full training state of a single-process run: gathered from the components' own
`state_dict()`s into a checkpoint folder, and handed back to them on resume.

    run_state = RunState(actor, critic, rollout, data, kl_ctrl, counters, tokenizer, config)
    write_full_state(run_state, folder, reason)     # the writer CheckpointManager.save() calls
    restore_full_state(run_state, path)             # back into freshly built components

Layout of the folder (inside CheckpointManager's atomic temp folder):

    actor/               Hugging Face folder (or PEFT adapters) with the tokenizer: the weights
    optim/actor.pt       the actor's optimizer and LR scheduler      (Actor.state_dict())
    critic/model.safetensors, optim/critic.pt   the same for a critic (PPO)
    rng.pt               torch CPU/CUDA, python, numpy RNGs + each component's mini-batch generator
    trainer_state.json   step, data position, KL controller, counters, finalized config, versions

Each step also reseeds torch from (seed, step), so a run stopped after step k and resumed ends
with the same parameters as an uninterrupted run. A sharded run writes its own layout
(verl/distributed/checkpoint.py); the backend says which one a run uses.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Optional

from verl.checkpoint.durable_files import CheckpointError, atomic_write_json, load_torch, save_torch
from verl.checkpoint.manager import read_manifest
from verl.checkpoint.model_files import load_module_weights, save_module, save_pretrained_into
from verl.checkpoint.rng_state import capture_rng, restore_rng


@dataclass
class RunState:
    """The components whose state a full checkpoint holds. actor/critic: state_dict() with
    "optimizer", "scheduler" and (when they shuffle) "generator", weights in `.model`; data and
    kl_ctrl, rollout: state_dict(); counters: verl.trainer.counters.RunCounters. The reference
    holds no state (a frozen copy of the starting policy, rebuilt from model.name); the rollout
    engine's weights are the actor's, synced after a restore."""

    actor: Any
    critic: Optional[Any]
    rollout: Any
    data: Any
    kl_ctrl: Any
    counters: Any
    tokenizer: Any
    config: Any


def scrub_config(config_dict: dict) -> dict:
    """The config as saved with a checkpoint (and compared on resume), a copy. API keys never live
    in the config (they are read from the environment variable `reward_fn.api_key_env` names);
    a password in a URL's userinfo is hidden (verl/redact.py)."""
    from verl.redact import redact_obj

    return redact_obj(json.loads(json.dumps(config_dict, default=str)))


def trainer_state(rs: RunState, reason: str) -> dict:
    """trainer_state.json: what the components other than the models hold."""
    counters = rs.counters.state_dict()
    return {
        "global_step": int(counters.pop("global_step")),
        "total_steps": int(rs.config.training.total_steps),
        "reason": reason,
        "data": rs.data.state_dict(),
        "kl_ctrl": rs.kl_ctrl.state_dict(),
        "rollout": rs.rollout.state_dict(),
        "counters": counters,
        "config": scrub_config(rs.config.to_dict()),
        "versions": _versions(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def restore_trainer_state(rs: RunState, state: dict) -> None:
    rs.data.load_state_dict(state["data"])
    rs.kl_ctrl.load_state_dict(state["kl_ctrl"])
    rs.rollout.load_state_dict(state.get("rollout", {}))
    rs.counters.load_state_dict({"global_step": int(state["global_step"]), **state.get("counters", {})})


def read_trainer_state(path: str) -> dict:
    try:
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read trainer_state.json ({exc})") from None


def require_full(path: str) -> None:
    manifest = read_manifest(path)
    if manifest.get("kind") != "full":
        raise CheckpointError(f"{path}: a '{manifest.get('kind')}' checkpoint cannot be resumed; resuming needs "
                              "a full-state checkpoint (--save_full_state or checkpoint.save_full_every)")


def write_actor(rs: RunState, folder: str) -> None:
    """actor/ as a Hugging Face folder (or PEFT adapters for a LoRA actor) with the tokenizer."""
    save_pretrained_into(rs.actor.model, rs.tokenizer, os.path.join(folder, "actor"), merge_lora=False)


def write_full_state(rs: RunState, folder: str, reason: str = "periodic") -> dict:
    """Everything in the module docstring, into `folder` (a CheckpointManager temp folder)."""
    write_actor(rs, folder)
    generators = {}
    for role, component in (("actor", rs.actor), ("critic", rs.critic)):
        if component is None:
            continue
        if role == "critic":
            save_module(component.model, os.path.join(folder, "critic", "model.safetensors"))
        own = component.state_dict()
        save_torch({"optimizer": own["optimizer"], "scheduler": own["scheduler"]},
                   os.path.join(folder, "optim", f"{role}.pt"))
        if own.get("generator") is not None:  # a shared critic has none (it shuffles with the actor)
            generators[role] = own["generator"]
    rng = capture_rng({})
    rng["generators"] = generators
    save_torch(rng, os.path.join(folder, "rng.pt"))
    state = trainer_state(rs, reason)
    atomic_write_json(os.path.join(folder, "trainer_state.json"), state)
    return {"reason": reason, "global_step": state["global_step"]}


def restore_full_state(rs: RunState, path: str) -> dict:
    """Load a verified full checkpoint into components built from the same config. Returns the
    trainer_state.json contents."""
    require_full(path)
    state = read_trainer_state(path)
    has_critic = os.path.exists(os.path.join(path, "optim", "critic.pt"))
    if (rs.critic is not None) != has_critic:
        raise CheckpointError(f"{path}: the checkpoint {'has' if has_critic else 'has no'} critic but this run "
                              f"{'has none' if rs.critic is None else 'needs one'}")
    rng = load_torch(os.path.join(path, "rng.pt"))
    load_module_weights(rs.actor.model, os.path.join(path, "actor"))
    for role, component in (("actor", rs.actor), ("critic", rs.critic)):
        if component is None:
            continue
        if role == "critic":
            from safetensors.torch import load_model

            device = next(component.model.parameters()).device
            load_model(component.model, os.path.join(path, "critic", "model.safetensors"), device=str(device))
        own = load_torch(os.path.join(path, "optim", f"{role}.pt"))
        own["generator"] = rng["generators"].get(role)
        component.load_state_dict(own)
    restore_trainer_state(rs, state)
    restore_rng(rng, {})
    # The generation engine must see the restored weights (no stale weights in vLLM).
    rs.rollout.sync_weights(rs.actor.model)
    return state


def _versions() -> dict:
    import torch

    out = {"torch": torch.__version__}
    try:
        from verl.version import __version__

        out["verl"] = __version__
    except ImportError:
        pass
    return out
