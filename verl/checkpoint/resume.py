"""Full training state: what an exact resume needs, how it is written, found and restored.

    state = resolve_resume(cfg)            # where to start: fresh, a checkpoint, a final save to
                                           # finish, or finished (claims the folder: run_folder.py)
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
import time
from dataclasses import dataclass
from typing import Optional

from verl.errors import ConfigError
from verl.checkpoint.manager import CheckpointError, CheckpointManager, read_manifest, verify_checkpoint
from verl.checkpoint.durable_files import atomic_write_json, load_torch, save_torch
from verl.checkpoint.model_files import load_module_weights, save_module, save_pretrained_into
from verl.checkpoint.rng_state import capture_rng, restore_rng
from verl.checkpoint.run_folder import (LOG_FILES, RUN_STATE, claim_run_folder, clean_stale_temps, continues_in,
                                     describe_earlier_run, earlier_run_refusal, final_save_problem,
                                     prepare_run_dir, read_run_state, write_run_state)

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
    "data.val_files", "data.val_source", "data.val_n", "data.val_max_samples", "data.baseline_prompt",
    "reward_fn.device", "reward_fn.rm_batch_size", "reward_fn.timeout_s", "reward_fn.max_retries",
    "reward_fn.concurrency", "reward_fn.api_key_env",
    "logging", "checkpoint", "distributed", "device",
)


@dataclass
class ResumePoint:
    """Where a run starts. `path` is None for a fresh start; `finished` means there is
    nothing left to train (global_step >= training.total_steps) and the final save is complete;
    `final_save` means the state at `path` is the last step but the final save a crash cut short
    must be redone from it; `move_earlier` means an earlier run in save_dir goes to previous_run_N/."""

    path: Optional[str] = None
    step: int = 0
    finished: bool = False
    note: str = ""
    final_save: bool = False
    move_earlier: bool = False


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
    """Where this run starts, from `checkpoint.resume` (none | auto | PATH). First the folder is
    checked and claimed for this process (run_folder.claim_run_folder: exit 2 when it is a file,
    not writable, or in use by another run) and temp files of crashed saves are removed, all
    before any model loads. Raises ConfigError (one line, exit 2) for a bad path, a
    non-resumable checkpoint, a changed config, or a new run over an earlier one.

    Called again in the same process with the same config before the run starts (the CLI, then
    the Trainer it builds), it returns the same answer without repeating its warnings."""
    ck = cfg.checkpoint
    lock = claim_run_folder(ck.save_dir)
    key = json.dumps(scrub_config(cfg.to_dict()), sort_keys=True)
    if lock.owner() is None and lock.memo.get("key") == key:
        return lock.memo["point"]
    try:
        removed = clean_stale_temps(ck.save_dir)
        if removed:
            warn(f"note: removed what interrupted saves left in {ck.save_dir}: {', '.join(removed)}")
        point = _resolve(cfg, warn)
    except BaseException:
        if lock.owner() is None:
            lock.release()
        raise
    lock.memo = {"key": key, "point": point}
    return point


def _new_run(cfg, note: str = "", allow_earlier: bool = False, path: Optional[str] = None,
             step: int = 0) -> ResumePoint:
    """A run that does not continue the one in save_dir: refused over an earlier run unless
    checkpoint.overwrite (or `allow_earlier`); the earlier run then moves to previous_run_N/."""
    save_dir = cfg.checkpoint.save_dir
    what = describe_earlier_run(save_dir)
    if what is not None and not (cfg.checkpoint.overwrite or allow_earlier):
        raise earlier_run_refusal(save_dir, what)
    return ResumePoint(path, step, False, note, move_earlier=what is not None)


def _final_done(save_dir: str, step: int) -> Optional[str]:
    """None when run_state.json says the run finished at `step` and its final save is all
    there; else why not."""
    run = read_run_state(save_dir) or {}
    if not run.get("finished"):
        return "run_state.json does not say finished" if run else "there is no run_state.json"
    if int(run.get("global_step", -1)) != step:
        return f"run_state.json is from step {run.get('global_step')}"
    return final_save_problem(save_dir, run)


def _resolve(cfg, warn) -> ResumePoint:
    ck = cfg.checkpoint
    spec = (ck.resume or "none").strip()
    total = cfg.training.total_steps
    if spec == "none":
        return _new_run(cfg)
    mgr = CheckpointManager(ck.save_dir, ck.keep_last)
    if spec == "auto":
        said: list[str] = []

        def tell(line: str) -> None:
            said.append(line)
            warn(line)

        path = mgr.find_latest("full", warn=tell)
        corrupted = [line.removeprefix("warning: skipping checkpoint ") for line in said
                     if line.startswith("warning: skipping checkpoint ")]
        run = read_run_state(ck.save_dir) or {}
        finished_at = int(run.get("global_step", 0)) if run.get("finished") else None
        ckpt_step = int(read_manifest(path)["step"]) if path else None
        if finished_at is not None and finished_at >= total:
            problem = final_save_problem(ck.save_dir, run)
            if problem is None:
                return ResumePoint(path if ckpt_step == finished_at else None, finished_at, True,
                                   f"the run in {ck.save_dir} already finished at step {finished_at} "
                                   f"(training.total_steps={total}); nothing to train. Raise training.total_steps "
                                   "to train further.")
            warn(f"warning: the final save of the run in {ck.save_dir} (step {finished_at}) is damaged: {problem}")
        if path is None:
            if corrupted:  # the last line names what the warnings above found
                raise ConfigError(f"checkpoint.resume: no full-state checkpoint in {mgr.root} verifies ("
                                  + "; ".join(corrupted) + "); restore those files, or start over with --resume none "
                                  "--overwrite (the earlier run is kept in previous_run_N/)")
            if finished_at is not None:
                raise ConfigError(f"checkpoint.resume: the run in {ck.save_dir} finished at step {finished_at} but "
                                  "saved no full state to continue from; save it with --save_full_state "
                                  "(or start over with --resume none --overwrite)")
            return _new_run(cfg, f"no checkpoint in {mgr.root}; starting from step 0", allow_earlier=True)
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
    here = continues_in(ck.save_dir, path)  # else: a checkpoint of another folder starts a run here
    if step >= total:
        why = _final_done(ck.save_dir, step) if here else None
        if here and why is None:
            return ResumePoint(path, step, True,
                               f"the checkpoint {path} is at step {step}, training.total_steps={total}: the run "
                               "already finished; nothing to train. Raise training.total_steps to train further.")
        note = (f"the state at {path} is the last step ({step} of {total}); "
                + (f"the final save in {ck.save_dir} is not complete ({why}); " if here else "")
                + f"writing the final save into {ck.save_dir} from it")
        point = ResumePoint(path, step, False, note) if here else _new_run(cfg, note, path=path, step=step)
        point.final_save = True
        return point
    note = f"resuming from {path} (step {step} of {total})"
    return ResumePoint(path, step, False, note) if here else _new_run(cfg, note, path=path, step=step)


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
           "config_differences", "read_run_state", "write_run_state", "CheckpointError", "LOG_FILES", "RUN_STATE"]

