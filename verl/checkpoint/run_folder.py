"""The run folder (checkpoint.save_dir): checked and claimed before any model loads, cleaned of
what crashed saves left, and never mixed with (or written over) an earlier run.

    lock = claim_run_folder(save_dir)          # a usable folder, held by this process (run_lock.py)
    removed = clean_stale_temps(save_dir)      # temp files/folders of interrupted saves
    describe_earlier_run(save_dir)             # None, or what an earlier run left there
    prepare_run_dir(save_dir, point)           # continue its logs, or move the earlier run aside

An earlier run's files are never deleted or overwritten without the user asking: a new run in a
folder that holds one is refused by resolve_resume (exit 2) unless `checkpoint.overwrite`
(--overwrite), and then the earlier run is moved to `previous_run_N/` (N = 1, 2, ...).

run_state.json ({"finished": true, "global_step": N, "final_files": {...}}) is written after the
final save is complete and lists each final file's size, mtime and sha256, so a resume can tell
a complete final save from one a crash cut short.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Callable, Optional

from verl.errors import ConfigError
from verl.checkpoint.manager import CheckpointManager, remove_path, temp_owner
from verl.checkpoint.durable_files import atomic_write_json, atomic_write_text, fsync_path, sha256_file
from verl.checkpoint.run_lock import LOCK_NAME, RunLock, hold_run_folder

RUN_STATE = "run_state.json"
LOG_FILES = ("metrics.jsonl", "samples.jsonl", "text.jsonl")
# Names only a run (or a saved model) puts into a folder: their presence means an earlier run.
RUN_FILES = {*LOG_FILES, RUN_STATE, "config.yaml", "run_info.json", "checkpoints", "config.json",
             "adapter_config.json", "wandb"}
PREVIOUS_RE = re.compile(r"^previous_run(?:_(\d+))?$")


# ---------------------------------------------------------------------------
# Checking and claiming the folder
# ---------------------------------------------------------------------------


def check_save_dir(save_dir: str) -> None:
    """A folder the run can write into, created if needed; ConfigError (exit 2) naming
    checkpoint.save_dir when it is a file, lies under a file, or cannot be written."""
    path = os.path.abspath(os.path.expanduser(save_dir))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"checkpoint.save_dir: {save_dir} is a file, not a folder; choose another --save_dir")
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"checkpoint.save_dir: {save_dir} lies under {parent}, which is a file; choose "
                          "another --save_dir")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"checkpoint.save_dir: cannot create {save_dir} ({exc.strerror}); choose another "
                          "--save_dir") from None
    for folder in (path, os.path.join(path, "checkpoints")):
        if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
            raise ConfigError(f"checkpoint.save_dir: {folder} is not writable; fix its permissions or choose "
                              "another --save_dir")


def claim_run_folder(save_dir: str) -> RunLock:
    """check_save_dir, then this process's lock on the folder (ConfigError if another run has it)."""
    check_save_dir(save_dir)
    return hold_run_folder(save_dir)


def clean_stale_temps(save_dir: str, tell: Callable[[str], None] = lambda line: None) -> list[str]:
    """Remove the temp files and folders interrupted saves left in save_dir and checkpoints/
    (`.tmp-save-PID/`, `.tmp-step_N-PID/`, `.trash-step_N-PID/`, `latest.tmp-PID`, ...).
    Called with the folder's lock held, so no other run can be writing them; those of this
    process are kept. Returns their names relative to save_dir.

    A `.tmp-save-PID/` whose files were all complete when the crash came (a final save cut off
    while its files moved into place) may be the only complete copy of the trained weights: it
    is never removed; its remaining files are moved into place (model_files.promote_interrupted_save)
    and `tell` says so."""
    from verl.checkpoint.model_files import promote_interrupted_save

    removed = []
    for sub in ("", "checkpoints"):
        folder = os.path.join(save_dir, sub)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            pid = temp_owner(name)
            if pid is None or pid == os.getpid():
                continue
            path = os.path.join(folder, name)
            if name.startswith(".tmp-save-") and os.path.isdir(path):
                moved = promote_interrupted_save(path)
                if moved is not None:
                    tell(f"note: a save cut short by a crash (process {pid}) had written every file; its "
                         f"{len(moved)} files are now in place in {folder} ({', '.join(moved[:4])}"
                         f"{', ...' if len(moved) > 4 else ''}), sizes checked against the save's own list")
                    continue
            remove_path(path)
            removed.append(os.path.join(sub, name) if sub else name)
    return removed


# ---------------------------------------------------------------------------
# run_state.json and the final save
# ---------------------------------------------------------------------------


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


def file_records(folder: str, names: list[str]) -> dict:
    """{name: {size, mtime_ns, sha256}} of files just written (for run_state.json)."""
    out = {}
    for rel in names:
        path = os.path.join(folder, rel)
        st = os.stat(path)
        out[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(path)}
    return out


def final_save_problem(save_dir: str, run: dict) -> Optional[str]:
    """None when the final save that run_state.json records is all there; else what is wrong.
    Sizes are always compared; a file's checksum only when its mtime changed (a copied folder),
    so that answering "already finished" stays fast for large models."""
    files = run.get("final_files")
    if files is None:  # written before verl recorded its final files: the weights must be there
        weights = "adapter_model.safetensors" if run.get("save_mode") == "lora" else None
        names = os.listdir(save_dir) if os.path.isdir(save_dir) else []
        found = weights in names if weights else any(n.endswith(".safetensors") for n in names)
        return None if found else f"no {weights or '*.safetensors'} weights in {save_dir}"
    for rel, info in sorted(files.items()):
        path = os.path.join(save_dir, rel)
        if not os.path.isfile(path):
            return f"'{rel}' is missing"
        st = os.stat(path)
        if st.st_size != info["size"]:
            return f"'{rel}' has {st.st_size} bytes, the final save wrote {info['size']}"
        if st.st_mtime_ns != info.get("mtime_ns") and sha256_file(path) != info["sha256"]:
            return f"'{rel}' does not match the checksum of the final save"
    return None


# ---------------------------------------------------------------------------
# Earlier runs
# ---------------------------------------------------------------------------


def _own_entries(save_dir: str) -> list[str]:
    """Entries of save_dir that belong to the run in it (not the lock, not previous runs)."""
    if not os.path.isdir(save_dir):
        return []
    return sorted(n for n in os.listdir(save_dir) if n != LOCK_NAME and not PREVIOUS_RE.match(n))


def describe_earlier_run(save_dir: str) -> Optional[str]:
    """What an earlier run left in save_dir ("finished at step 3: final model, 2 checkpoints,
    3 logged steps"), or None when it holds none of a run's files."""
    names = _own_entries(save_dir)
    marks = [n for n in names if n in RUN_FILES or n.endswith((".safetensors", ".safetensors.index.json"))
             or n.startswith("events.out.tfevents")]
    if not marks:
        return None
    parts = []
    run = read_run_state(save_dir) or {}
    weights = [n for n in names if n.endswith(".safetensors")]
    if weights:
        parts.append(f"model files ({', '.join(weights[:3])}{', ...' if len(weights) > 3 else ''})")
    n_ckpt = len(CheckpointManager(save_dir).list())
    if n_ckpt:
        parts.append(f"{n_ckpt} checkpoint{'s' if n_ckpt > 1 else ''}")
    steps = _logged_steps(os.path.join(save_dir, "metrics.jsonl"))
    if steps:
        parts.append(f"{steps} logged step{'s' if steps > 1 else ''}")
    head = f"finished at step {run.get('global_step')}" if run.get("finished") else "a run"
    return f"{head}: {', '.join(parts) if parts else ', '.join(marks)}"


def _logged_steps(path: str) -> int:
    from verl.tracking.plot import read_jsonl

    return len({int(row["step"]) for row in read_jsonl(path) if isinstance(row.get("step"), int) and row["step"] >= 1})


def earlier_run_refusal(save_dir: str, what: str) -> ConfigError:
    return ConfigError(
        f"checkpoint.save_dir: {save_dir} holds an earlier run ({what}); pass --resume auto to continue it, "
        f"choose a new --save_dir, or pass --overwrite (checkpoint.overwrite) to start over there: the earlier "
        f"run is then moved to {os.path.join(save_dir, next_previous_name(save_dir))}/, nothing is deleted")


def next_previous_name(save_dir: str) -> str:
    numbers = [int(m.group(1)) for m in map(PREVIOUS_RE.match, os.listdir(save_dir) if os.path.isdir(save_dir)
                                            else []) if m and m.group(1)]
    return f"previous_run_{max(numbers, default=0) + 1}"


def move_earlier_run(save_dir: str) -> Optional[str]:
    """Move everything of the run in save_dir into a new previous_run_N/; returns its path
    (None when there was nothing to move)."""
    names = _own_entries(save_dir)
    if not names:
        return None
    dest = os.path.join(save_dir, next_previous_name(save_dir))
    os.makedirs(dest)
    for name in names:
        os.replace(os.path.join(save_dir, name), os.path.join(dest, name))
    fsync_path(save_dir)
    return dest


# ---------------------------------------------------------------------------
# Before the logger opens its files
# ---------------------------------------------------------------------------


def continues_in(save_dir: str, path: Optional[str]) -> bool:
    """True when checkpoint `path` lies in save_dir's own checkpoints/ (the run goes on there)."""
    if path is None:
        return False
    root = os.path.realpath(os.path.join(save_dir, "checkpoints"))
    return os.path.dirname(os.path.realpath(path)) == root


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


def prepare_run_dir(save_dir: str, point, warn: Callable[[str], None] = print) -> None:
    """Before the logger opens its files (the folder's lock held). Continuing from step k of this
    folder: drop log rows after step k (those steps are trained again). A new run where an earlier
    one is (resolve_resume allowed it: checkpoint.overwrite, or --resume auto with nothing to resume
    from): move the earlier run to previous_run_N/ and say so. Nothing is moved for a finished run."""
    os.makedirs(save_dir, exist_ok=True)
    if point.finished:
        return
    if continues_in(save_dir, point.path):
        for name in LOG_FILES:
            _truncate_jsonl(os.path.join(save_dir, name), point.step)
        return
    what = describe_earlier_run(save_dir)
    if what is None:
        return
    if not getattr(point, "move_earlier", False):
        raise earlier_run_refusal(save_dir, what)  # never write over an earlier run
    dest = move_earlier_run(save_dir)
    if getattr(point, "nothing_to_resume", False):  # --resume auto was asked for and found no full state
        hint = ("--resume auto found no full-state checkpoint to continue from, so this is a new run (a run "
                "can be continued when it saves one: checkpoint.save_full_every, or --save_full_state)")
    else:
        hint = "pass --resume auto to continue a run instead of starting a new one"
    warn(f"note: {save_dir} held an earlier run ({what}); moved it to {dest}/ (nothing deleted); {hint}")
