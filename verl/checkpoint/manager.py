"""Checkpoints on disk: atomic folders with a checksummed manifest, and the weight files.

Layout (SAVE_DIR = checkpoint.save_dir):

    SAVE_DIR/model.safetensors, config.json, tokenizer*   the final actor (Hugging Face folder)
    SAVE_DIR/run_state.json                              {"finished": true, "global_step": N, ...}
    SAVE_DIR/checkpoints/
        step_000100/                 kind "actor": what deployment needs
            actor/                   Hugging Face folder (safetensors + config + tokenizer),
                                     or PEFT adapters when the actor is a PeftModel
            manifest.json
        step_001000/                 kind "full": everything an exact resume needs
            actor/  critic/model.safetensors  optim/{actor,critic}.pt  rng.pt
            trainer_state.json  manifest.json
        latest                       text file: the newest checkpoint's folder name
        latest_full                  text file: the newest full (resumable) checkpoint's name

Atomicity: a checkpoint is written into `checkpoints/.tmp-<name>-<pid>`, every file is
fsynced, `manifest.json` (size and sha256 of every file) is written last inside it, the
folder is renamed to its final name, and only then are the pointer files replaced (each
via temp file + fsync + rename). A crash or `kill -9` at any moment therefore leaves the
previous checkpoint and pointers intact; a half-written folder never has a final name.

Which is newest: each manifest carries `seq`, one more than the largest `seq` in the folder
when it was saved, so "newest" means "saved last" (a run resumed from an older step and saved
again outranks the steps it abandoned). `find_latest` takes the newest folder of a kind that
verifies; the pointer files are for people and other tools, and a stale one (a crash or a
read-only folder between the rename and the pointer write) cannot make an older checkpoint win.

Safety: weights are only written and read as safetensors. Optimizer, scheduler and RNG
states are `torch.save`d as plain tensors/dicts/lists/numbers and read back with
`torch.load(weights_only=True)`, which refuses pickled code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import Callable, Optional

from verl.checkpoint.durable_files import (CheckpointError, atomic_write_json, atomic_write_text, files_under,
                                         fsync_path, fsync_tree, sha256_file, test_kill_point)

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
STEP_RE = re.compile(r"^step_(\d+)$")
KINDS = ("actor", "full", "lora")


# ---------------------------------------------------------------------------
# Checkpoint folders
# ---------------------------------------------------------------------------


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def read_manifest(path: str) -> dict:
    mpath = os.path.join(path, MANIFEST)
    if not os.path.isfile(mpath):
        raise CheckpointError(f"{path}: not a checkpoint (no {MANIFEST}; an interrupted save never gets one)")
    try:
        with open(mpath, encoding="utf-8") as fh:
            return json.load(fh)
    except ValueError as exc:
        raise CheckpointError(f"{mpath}: unreadable ({exc})") from None


def verify_checkpoint(path: str, checksums: bool = True) -> dict:
    """Check every file the manifest lists (size, and sha256 unless checksums=False).
    Returns the manifest; raises CheckpointError naming the first bad file."""
    manifest = read_manifest(path)
    stats = []
    for rel in manifest.get("files", {}):
        try:
            st = os.stat(os.path.join(path, rel))
            stats.append((rel, st.st_size, st.st_mtime_ns))
        except OSError:
            stats.append((rel, -1, -1))
    key = (os.path.abspath(path), tuple(stats))
    if checksums and key in _VERIFIED:  # hashing a large checkpoint once per process is enough
        checksums = False
    for rel, info in manifest.get("files", {}).items():
        fpath = os.path.join(path, rel)
        if not os.path.isfile(fpath):
            raise CheckpointError(f"{path}: file '{rel}' listed in the manifest is missing")
        size = os.path.getsize(fpath)
        if size != info["size"]:
            raise CheckpointError(f"{path}: file '{rel}' has {size} bytes, the manifest says {info['size']}")
        if checksums and sha256_file(fpath) != info["sha256"]:
            raise CheckpointError(f"{path}: file '{rel}' does not match its sha256 checksum (corrupted)")
    if checksums:
        _VERIFIED.add(key)
    return manifest


_VERIFIED: set = set()  # (folder, file sizes and mtimes) already checksummed by this process


class CheckpointManager:
    """Writes, lists, finds and prunes the checkpoints under `save_dir/checkpoints`."""

    def __init__(self, save_dir: str, keep_last: int = 2):
        self.save_dir = save_dir
        self.root = os.path.join(save_dir, "checkpoints")
        self.keep_last = max(1, int(keep_last))

    # ------------------------------------------------------------ writing
    def save(self, step: int, kind: str, write: Callable[[str], Optional[dict]], *, prune: bool = True,
             meta: Optional[dict] = None) -> str:
        """Write checkpoint `step` of `kind` atomically; `write(folder)` fills the folder
        (and may return extra manifest fields). Returns the final folder path."""
        if kind not in KINDS:
            raise ValueError(f"checkpoint kind '{kind}' is not one of {KINDS}")
        os.makedirs(self.root, exist_ok=True)
        name = step_name(step)
        final = os.path.join(self.root, name)
        tmp = os.path.join(self.root, f".tmp-{name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            extra = write(tmp) or {}
            fsync_tree(tmp)
            test_kill_point("ckpt_filled")
            files = {rel: {"size": os.path.getsize(os.path.join(tmp, rel)),
                           "sha256": sha256_file(os.path.join(tmp, rel))} for rel in files_under(tmp)}
            seq = 1 + max((order for order, _, _ in self._ordered()), default=(0, 0))[0]
            manifest = {"format": FORMAT_VERSION, "step": int(step), "kind": kind, "files": files, "seq": seq,
                        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            manifest.update(meta or {})
            manifest.update(extra)
            atomic_write_json(os.path.join(tmp, MANIFEST), manifest)  # last file: marks the folder complete
            test_kill_point("ckpt_manifest")
            trash = None
            if os.path.exists(final):  # the same step saved again (e.g. after a resume)
                trash = os.path.join(self.root, f".trash-{name}-{os.getpid()}")
                shutil.rmtree(trash, ignore_errors=True)
                os.rename(final, trash)
            os.rename(tmp, final)
            fsync_path(self.root)
            test_kill_point("ckpt_renamed")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if trash:
            shutil.rmtree(trash, ignore_errors=True)
        # Pointers last: until here they still name the previous (complete) checkpoint.
        atomic_write_text(os.path.join(self.root, "latest"), name + "\n")
        test_kill_point("pointer_latest")
        if kind == "full":
            atomic_write_text(os.path.join(self.root, "latest_full"), name + "\n")
            test_kill_point("pointer_latest_full")
        if prune:
            self.prune()
        return final

    # ------------------------------------------------------------ reading
    def list(self) -> list[tuple[int, str]]:
        """(step, path) of every completed checkpoint folder (one with a manifest), by step."""
        if not os.path.isdir(self.root):
            return []
        out = []
        for name in os.listdir(self.root):
            m = STEP_RE.match(name)
            path = os.path.join(self.root, name)
            if m and os.path.isfile(os.path.join(path, MANIFEST)):
                out.append((int(m.group(1)), path))
        return sorted(out)

    def _ordered(self) -> list[tuple[tuple[int, int], str, Optional[dict]]]:
        """((seq, step), path, manifest or None if unreadable) of every completed folder, newest
        (saved last) first. Manifests from before `seq` existed count as seq 0, i.e. by step."""
        out = []
        for step, path in self.list():
            try:
                manifest = read_manifest(path)
            except CheckpointError:
                manifest = None
            seq = int((manifest or {}).get("seq", 0))
            out.append(((seq, step), path, manifest))
        return sorted(out, key=lambda item: item[0], reverse=True)

    def pointer(self, which: str = "latest") -> Optional[str]:
        path = os.path.join(self.root, which)
        if not os.path.isfile(path):
            return None
        try:
            name = open(path, encoding="utf-8").read().strip()
        except OSError:
            return None
        return os.path.join(self.root, name) if STEP_RE.match(name) else None

    def scan(self, kind: Optional[str] = "full", checksums: bool = True) -> tuple[Optional[str], list[str]]:
        """(the newest checkpoint of `kind` (None = any) that verifies, or None; one line per
        newer folder of that kind that was skipped, naming its bad file)."""
        rejected = []
        for _, path, manifest in self._ordered():
            if manifest is not None and kind is not None and manifest.get("kind") != kind:
                continue
            try:
                manifest = verify_checkpoint(path, checksums=checksums)
            except CheckpointError as exc:
                rejected.append(str(exc))
                continue
            if kind is None or manifest.get("kind") == kind:
                return path, rejected
        return None, rejected

    def find_latest(self, kind: Optional[str] = "full", checksums: bool = True,
                    warn: Callable[[str], None] = print) -> Optional[str]:
        """The newest checkpoint of `kind` (None = any) that verifies; each newer one that does
        not is skipped with a warning, and a pointer that names an older one is reported."""
        path, rejected = self.scan(kind, checksums)
        for line in rejected:
            warn(f"warning: skipping checkpoint {line}")
        if path is not None and kind in ("full", None):
            which = "latest_full" if kind == "full" else "latest"
            ptr = self.pointer(which)
            order = {p: o for o, p, _ in self._ordered()}
            if ptr is not None and ptr in order and order[ptr] < order[path]:
                warn(f"note: {os.path.join(self.root, which)} names {os.path.basename(ptr)}, but "
                     f"{os.path.basename(path)} was saved after it and verifies; using {os.path.basename(path)}")
        return path

    # ------------------------------------------------------------ pruning
    def prune(self) -> None:
        """Keep the newest `keep_last` checkpoints of each kind (and whatever a pointer names);
        remove leftovers of interrupted saves from processes that are gone."""
        keep = {self.pointer("latest"), self.pointer("latest_full")}
        by_kind: dict[str, list[str]] = {}
        for _, path, manifest in self._ordered():
            if manifest is None:
                continue
            by_kind.setdefault(manifest.get("kind", "full"), []).append(path)
        for paths in by_kind.values():
            for path in paths[self.keep_last:]:
                if path not in keep:
                    # Rename first: a crash mid-delete leaves a temp name, never a half checkpoint.
                    trash = os.path.join(self.root, f".trash-{os.path.basename(path)}-{os.getpid()}")
                    os.rename(path, trash)
                    shutil.rmtree(trash, ignore_errors=True)
        for name in os.listdir(self.root):
            pid = temp_owner(name)
            if pid is not None and not _pid_alive(pid):
                remove_path(os.path.join(self.root, name))


TEMP_RE = re.compile(r"^\.(?:tmp|trash)-.+-(\d+)$|^.+\.tmp-(\d+)$")


def temp_owner(name: str) -> Optional[int]:
    """The pid in a temporary name this package writes (`.tmp-step_N-PID`, `.trash-step_N-PID`,
    `.tmp-save-PID`, `latest.tmp-PID`, `run_state.json.tmp-PID`, ...), or None for other names."""
    m = TEMP_RE.match(name)
    return int(m.group(1) or m.group(2)) if m else None


def remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
