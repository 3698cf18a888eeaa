"""Full training state: what an exact resume needs, how it is written, found and restored.

    state = resolve_resume(cfg)            # where to start: fresh, a checkpoint, or finished
    prepare_run_dir(cfg.checkpoint.save_dir, state)   # metrics.jsonl continues without duplicates
    write_full_state(trainer, folder)      # the writer CheckpointManager.save() calls
    restore_full_state(trainer, path)      # back into a freshly built Trainer

A full state holds: actor and critic weights (safetensors), their optimizers and LR
schedulers, the RNG states of every generator a step uses (torch CPU/CUDA, python
`random`, numpy, the actor's and critic's mini-batch generators), the prompt loader's
position, the KL controller, step counters (global step, skipped steps, bad-step streak)
and the finalized config. Since each step also reseeds torch from (seed, step), a run
stopped after step k and resumed ends with the same parameters as an uninterrupted run.

Resuming into a config that differs in a way that changes the training math (model,
algorithm, batch sizes, rollout.n, lr, data, reward...) is refused with the differences
listed, unless `checkpoint.resume_force` (--resume_force). Keys that do not change the
math (total_steps, logging, devices, micro-batch sizes, engine memory knobs) may differ.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from typing import Optional

from verl.config import ConfigError
from verl.trainer.checkpoint import CheckpointError, CheckpointManager, read_manifest, verify_checkpoint
from verl.trainer.durable_files import atomic_write_json, atomic_write_text, load_torch, save_torch
from verl.trainer.model_files import load_module_weights, save_module, save_pretrained_into
from verl.trainer.rng_state import capture_rng, restore_rng

RUN_STATE = "run_state.json"
LOG_FILES = ("metrics.jsonl", "samples.jsonl", "text.jsonl")

# Config keys that may change between a checkpoint and its resume: they do not change the
# training math (or only by float rounding), so the resumed run still matches.
SAFE_TO_CHANGE = (
    "training.total_steps", "training.max_minutes", "training.max_bad_steps", "training.val_every",
    "training.micro_batch_size",
    "training.max_tokens_per_micro_batch", "training.logprob_chunk_size", "training.logprob_keep_logits",
    "training.offload_optimizer",
    "training.offload_idle_models", "training.use_packed_samples",
    "model.enable_gradient_checkpointing", "model.use_flash_attention", "model.attn_implementation", "model.trust_remote_code",
    "model.torch_compile",
    "critic.trust_remote_code",
    "rollout.name", "rollout.batch_size", "rollout.max_num_seqs", "rollout.gpu_memory_utilization",
    "rollout.tensor_model_parallel_size", "rollout.max_num_batched_tokens", "rollout.max_model_len",
    "rollout.enable_sleep_mode", "rollout.kv_cache_gb", "rollout.enforce_eager",
    "data.val_files", "data.val_n", "data.val_max_samples", "data.baseline_prompt",
    "reward_fn.device", "reward_fn.rm_batch_size", "reward_fn.timeout_s", "reward_fn.max_retries",
    "reward_fn.concurrency", "reward_fn.api_key_env",
    "logging", "checkpoint", "distributed", "device",
)


@dataclass
class ResumePoint:
    """Where a run starts. `path` is None for a fresh start; `finished` means there is
    nothing left to train (global_step >= training.total_steps)."""

    path: Optional[str] = None
    step: int = 0
    finished: bool = False
    note: str = ""


# ---------------------------------------------------------------------------
# Writing and restoring
# ---------------------------------------------------------------------------


def scrub_config(config_dict: dict) -> dict:
    """The config as saved with a checkpoint. Secrets never live in the config (API keys are
    read from the environment variable that `reward_fn.api_key_env` names), so this is a copy."""
    return json.loads(json.dumps(config_dict, default=str))


def _generators(trainer) -> dict:
    gens = {"actor": trainer.actor.generator}
    if trainer.critic is not None and trainer.critic.generator is not None:  # a shared critic has none
        gens["critic"] = trainer.critic.generator
    return gens


def trainer_state(trainer, reason: str) -> dict:
    hooks = trainer.hooks
    return {
        "global_step": int(trainer.global_step),
        "total_steps": int(trainer.config.training.total_steps),
        "reason": reason,
        "data": trainer.train_data.state_dict(),
        "kl_ctrl": trainer.kl_ctrl.state_dict(),
        "counters": {"bad_steps": int(hooks.bad_steps), "skipped_steps": int(hooks.skipped_steps),
                     "last_good_step": int(hooks.last_good_step)},
        "config": scrub_config(trainer.config.to_dict()),
        "versions": _versions(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_actor(trainer, folder: str) -> None:
    """actor/ as a Hugging Face folder (or PEFT adapters for a LoRA actor) with the tokenizer."""
    save_pretrained_into(trainer.actor.model, trainer.tokenizer, os.path.join(folder, "actor"), merge_lora=False)


def write_full_state(trainer, folder: str, reason: str = "periodic") -> dict:
    """Everything in the module docstring, into `folder` (a CheckpointManager temp folder)."""
    write_actor(trainer, folder)
    save_torch({"optimizer": trainer.actor.optimizer.state_dict(),
                "scheduler": trainer.actor.scheduler.state_dict()}, os.path.join(folder, "optim", "actor.pt"))
    if trainer.critic is not None:
        save_module(trainer.critic.model, os.path.join(folder, "critic", "model.safetensors"))
        save_torch({"optimizer": trainer.critic.optimizer.state_dict(),
                    "scheduler": trainer.critic.scheduler.state_dict()}, os.path.join(folder, "optim", "critic.pt"))
    save_torch(capture_rng(_generators(trainer)), os.path.join(folder, "rng.pt"))
    state = trainer_state(trainer, reason)
    atomic_write_json(os.path.join(folder, "trainer_state.json"), state)
    return {"reason": reason, "global_step": state["global_step"]}


def read_trainer_state(path: str) -> dict:
    try:
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read trainer_state.json ({exc})") from None


def restore_full_state(trainer, path: str) -> dict:
    """Load a verified full checkpoint into `trainer` (built from the same config). Returns the
    trainer_state.json contents (its "counters" belong to RunHooks, which restores them)."""
    manifest = read_manifest(path)
    if manifest.get("kind") != "full":
        raise CheckpointError(f"{path}: a '{manifest.get('kind')}' checkpoint cannot be resumed; resuming needs "
                              "a full-state checkpoint (--save_full_state or checkpoint.save_full_every)")
    state = read_trainer_state(path)
    load_module_weights(trainer.actor.model, os.path.join(path, "actor"))
    actor_optim = load_torch(os.path.join(path, "optim", "actor.pt"))
    trainer.actor.optimizer.load_state_dict(actor_optim["optimizer"])
    trainer.actor.scheduler.load_state_dict(actor_optim["scheduler"])
    has_critic = os.path.exists(os.path.join(path, "optim", "critic.pt"))
    if (trainer.critic is not None) != has_critic:
        raise CheckpointError(f"{path}: the checkpoint {'has' if has_critic else 'has no'} critic but this run "
                              f"{'has none' if trainer.critic is None else 'needs one'}")
    if trainer.critic is not None:
        from safetensors.torch import load_model

        load_model(trainer.critic.model, os.path.join(path, "critic", "model.safetensors"),
                   device=str(trainer.device))
        critic_optim = load_torch(os.path.join(path, "optim", "critic.pt"))
        trainer.critic.optimizer.load_state_dict(critic_optim["optimizer"])
        trainer.critic.scheduler.load_state_dict(critic_optim["scheduler"])
    trainer.train_data.load_state_dict(state["data"])
    trainer.kl_ctrl.load_state_dict(state["kl_ctrl"])
    restore_rng(load_torch(os.path.join(path, "rng.pt")), _generators(trainer))
    trainer.global_step = int(state["global_step"])
    # The generation engine must see the restored weights (no stale weights in vLLM).
    trainer.rollout.sync_weights(trainer.actor.model)
    return state


# ---------------------------------------------------------------------------
# Deciding where to start
# ---------------------------------------------------------------------------


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def config_differences(saved: dict, current: dict) -> list[str]:
    """'key: saved -> current' for every key that matters and differs. Keys only one side has
    (a config key added or removed by a verl upgrade) are not compared."""
    a, b = _flatten(scrub_config(saved)), _flatten(scrub_config(current))
    diffs = []
    for key in sorted(set(a) & set(b)):
        if any(key == s or key.startswith(s + ".") for s in SAFE_TO_CHANGE):
            continue
        if a[key] != b[key]:
            diffs.append(f"{key}: {a[key]!r} -> {b[key]!r}")
    return diffs


def read_run_state(save_dir: str) -> Optional[dict]:
    path = os.path.join(save_dir, RUN_STATE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def write_run_state(save_dir: str, **fields) -> None:
    fields.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    atomic_write_json(os.path.join(save_dir, RUN_STATE), fields)


def _checkpoint_at(spec: str, warn) -> str:
    """A checkpoint folder from a user path: a step folder, a checkpoints/ folder or a save_dir."""
    path = os.path.abspath(os.path.expanduser(spec))
    if not os.path.exists(path):
        raise ConfigError(f"checkpoint.resume: '{spec}' does not exist (use auto, none, or a checkpoint folder)")
    if os.path.isfile(os.path.join(path, "manifest.json")):
        return path
    mgr = CheckpointManager(path)  # a save_dir ...
    if os.path.basename(path) == "checkpoints" or not os.path.isdir(mgr.root):
        mgr.root = path  # ... or the checkpoints/ folder itself
    found = mgr.find_latest("full", warn=warn)
    if found:
        return found
    raise ConfigError(f"checkpoint.resume: '{spec}' holds no complete full-state checkpoint "
                      "(a step_NNNNNN folder with manifest.json)")


def resolve_resume(cfg, warn=print) -> ResumePoint:
    """Where this run starts, from `checkpoint.resume` (none | auto | PATH); raises ConfigError
    (one line, exit 2) for a bad path, a non-resumable checkpoint or a changed config."""
    ck = cfg.checkpoint
    spec = (ck.resume or "none").strip()
    total = cfg.training.total_steps
    if spec == "none":
        return ResumePoint()
    mgr = CheckpointManager(ck.save_dir, ck.keep_last)
    if spec == "auto":
        path = mgr.find_latest("full", warn=warn)
        run = read_run_state(ck.save_dir) or {}
        finished_at = int(run.get("global_step", 0)) if run.get("finished") else None
        ckpt_step = int(read_manifest(path)["step"]) if path else None
        if finished_at is not None and finished_at >= total:
            return ResumePoint(path if ckpt_step == finished_at else None, finished_at, True,
                               f"the run in {ck.save_dir} already finished at step {finished_at} "
                               f"(training.total_steps={total}); nothing to train. Raise training.total_steps "
                               "to train further.")
        if path is None:
            if finished_at is not None:
                raise ConfigError(f"checkpoint.resume: the run in {ck.save_dir} finished at step {finished_at} but "
                                  "saved no full state to continue from; save it with --save_full_state "
                                  "(or start over with --resume none)")
            return ResumePoint(note=f"no checkpoint in {mgr.root}; starting from step 0")
        if finished_at is not None and ckpt_step < finished_at:
            warn(f"warning: the run finished at step {finished_at} but its newest full state is step {ckpt_step}; "
                 f"steps {ckpt_step + 1}..{finished_at} will be trained again")
    else:
        path = _checkpoint_at(spec, warn)
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            raise ConfigError(f"checkpoint.resume: {exc}") from None
    manifest = read_manifest(path)
    if manifest.get("kind") != "full":
        raise ConfigError(f"checkpoint.resume: {path} is a '{manifest.get('kind')}' checkpoint; resuming needs a "
                          "full-state one (--save_full_state or checkpoint.save_full_every)")
    state = read_trainer_state(path)
    diffs = config_differences(state.get("config", {}), cfg.to_dict())
    if diffs:
        listing = "; ".join(diffs)
        if not ck.resume_force:
            raise ConfigError(f"checkpoint.resume: the config differs from the checkpoint's ({path}) in ways that "
                              f"change training: {listing}. Pass --resume_force to resume anyway, or --resume none")
        warn(f"warning: resuming with a changed config (--resume_force): {listing}")
    step = int(state["global_step"])
    if step >= total:
        return ResumePoint(path, step, True,
                           f"the checkpoint {path} is at step {step}, training.total_steps={total}: the run already "
                           "finished; nothing to train. Raise training.total_steps to train further.")
    return ResumePoint(path, step, False, f"resuming from {path} (step {step} of {total})")


# ---------------------------------------------------------------------------
# The run folder: logs continue without duplicated steps
# ---------------------------------------------------------------------------


def _truncate_jsonl(path: str, last_step: int) -> None:
    """Keep the rows with step <= last_step (rows logged after the checkpoint are redone)."""
    if not os.path.isfile(path):
        return
    kept = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if isinstance(row, dict) and int(row.get("step", 0)) <= last_step:
                kept.append(json.dumps(row, ensure_ascii=False) + "\n")

    atomic_write_text(path, "".join(kept))


def prepare_run_dir(save_dir: str, point: ResumePoint, warn=print) -> None:
    """Before the logger opens its files. Resuming from step k: drop log rows after step k.
    A fresh start in a folder that holds an earlier run: move that run's logs, checkpoints
    and run state to `previous_run/` (replacing an older one) and say so."""
    os.makedirs(save_dir, exist_ok=True)
    if point.path is not None or point.finished:
        if not point.finished:
            for name in LOG_FILES:
                _truncate_jsonl(os.path.join(save_dir, name), point.step)
        return
    old = [n for n in (*LOG_FILES, RUN_STATE, "checkpoints") if os.path.exists(os.path.join(save_dir, n))]
    metrics = os.path.join(save_dir, "metrics.jsonl")
    has_run = os.path.isdir(os.path.join(save_dir, "checkpoints")) or (
        os.path.isfile(metrics) and os.path.getsize(metrics) > 0)
    if not has_run:
        return
    dest = os.path.join(save_dir, "previous_run")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for name in old:
        os.replace(os.path.join(save_dir, name), os.path.join(dest, name))
    warn(f"note: {save_dir} held an earlier run; starting a new one there (its logs and checkpoints moved to "
         f"{dest}; pass --resume auto to continue a run instead)")


def _versions() -> dict:
    import torch

    out = {"torch": torch.__version__}
    try:
        from verl.version import __version__

        out["verl"] = __version__
    except ImportError:
        pass
    return out


__all__ = ["ResumePoint", "resolve_resume", "prepare_run_dir", "write_full_state", "restore_full_state",
           "config_differences", "read_run_state", "write_run_state", "CheckpointError"]

