"""Where a run starts, and whether a checkpoint may be resumed with the current config.

    state = resolve_resume(cfg)            # where to start: fresh, a checkpoint, a final save to
                                           # finish, or finished (claims the folder: run_folder.py)
    prepare_run_dir(cfg.checkpoint.save_dir, state)   # metrics.jsonl continues without duplicates

What a full state holds and how it is written and restored: verl/checkpoint/full_state.py.

Resuming into a config that differs in a way that changes the training math (model,
algorithm, batch sizes, rollout.n, lr, data, reward...) is refused with the differences
listed, unless `checkpoint.resume_force` (--resume_force). Keys that do not change the
math (total_steps, logging, devices, micro-batch sizes, engine memory knobs) may differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from verl.errors import ConfigError
from verl.checkpoint.manager import CheckpointError, CheckpointManager, read_manifest, verify_checkpoint
from verl.checkpoint.full_state import read_trainer_state, scrub_config
from verl.checkpoint.run_folder import (LOG_FILES, RUN_STATE, claim_run_folder, clean_stale_temps, continues_in,
                                     describe_earlier_run, earlier_run_refusal, final_save_problem,
                                     prepare_run_dir, read_run_state, write_run_state)

@dataclass
class ResumePoint:
    """Where a run starts. `path` is None for a fresh start; `finished` means there is
    nothing left to train (global_step >= training.total_steps) and the final save is complete;
    `final_save` means the state at `path` is the last step but the final save a crash cut short
    must be redone from it; `move_earlier` means an earlier run in save_dir goes to previous_run_N/;
    `nothing_to_resume` means `--resume auto` found no full-state checkpoint there, so the run starts anew."""

    path: Optional[str] = None
    step: int = 0
    finished: bool = False
    note: str = ""
    final_save: bool = False
    move_earlier: bool = False
    nothing_to_resume: bool = False


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


def config_differences(saved: dict, current: dict, safe=()) -> list[str]:
    """'key: saved -> current' for every key that matters and differs. `safe`: dotted keys (or
    whole sections) that may change on resume, as Config.resume_safe_keys() declares them. Keys
    only one side has (a config key added or removed by a verl upgrade) are not compared."""
    a, b = _flatten(scrub_config(saved)), _flatten(scrub_config(current))
    diffs = []
    for key in sorted(set(a) & set(b)):
        if any(key == s or key.startswith(s + ".") for s in safe):
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

    Called once per run: by the launcher (verl/trainer/launch.py), which hands the answer to the
    Trainer, or by a Trainer built without one (the Python API)."""
    ck = cfg.checkpoint
    lock = claim_run_folder(ck.save_dir)
    try:
        removed = clean_stale_temps(ck.save_dir, warn)
        if removed:
            warn(f"note: removed what interrupted saves left in {ck.save_dir}: {', '.join(removed)}")
        point = _resolve(cfg, warn)
    except BaseException:
        if lock.owner() is None:
            lock.release()
        raise
    return point


def _new_run(cfg, note: str = "", allow_earlier: bool = False, path: Optional[str] = None,
             step: int = 0, nothing_to_resume: bool = False) -> ResumePoint:
    """A run that does not continue the one in save_dir: refused over an earlier run unless
    checkpoint.overwrite (or `allow_earlier`); the earlier run then moves to previous_run_N/."""
    save_dir = cfg.checkpoint.save_dir
    what = describe_earlier_run(save_dir)
    if what is not None and not (cfg.checkpoint.overwrite or allow_earlier):
        raise earlier_run_refusal(save_dir, what)
    return ResumePoint(path, step, False, note, move_earlier=what is not None, nothing_to_resume=nothing_to_resume)


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
            return _new_run(cfg, f"no checkpoint in {mgr.root}; starting from step 0", allow_earlier=True,
                            nothing_to_resume=True)
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
    diffs = config_differences(state.get("config", {}), cfg.to_dict(), cfg.resume_safe_keys())
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


__all__ = ["ResumePoint", "resolve_resume", "prepare_run_dir", "config_differences", "read_run_state",
           "write_run_state", "CheckpointError", "LOG_FILES", "RUN_STATE"]
