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

Safety: weights are only written and read as safetensors. Optimizer, scheduler and RNG
states are `torch.save`d as plain tensors/dicts/lists/numbers and read back with
`torch.load(weights_only=True)`, which refuses pickled code.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import re
import shutil
import time
from typing import Callable, Optional

import torch

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
STEP_RE = re.compile(r"^step_(\d+)$")
KINDS = ("actor", "full", "lora")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupted or of the wrong kind (message says which)."""


# ---------------------------------------------------------------------------
# Durable file primitives
# ---------------------------------------------------------------------------


def fsync_path(path: str) -> None:
    """Flush a file's (or a folder's entries') data to the disk."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if os.path.isdir(path) else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:
        return  # e.g. folders cannot be opened on some platforms; best effort
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str, text: str) -> None:
    """Write `text` to `path` so that readers see the old or the new content, never a mix."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_path(folder)


def atomic_write_json(path: str, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def _files_under(folder: str) -> list[str]:
    out = []
    for root, _, names in os.walk(folder):
        for name in names:
            out.append(os.path.relpath(os.path.join(root, name), folder))
    return sorted(out)


# ---------------------------------------------------------------------------
# Torch objects with weights_only-loadable contents
# ---------------------------------------------------------------------------


def save_torch(obj, path: str) -> None:
    """torch.save of plain tensors/dicts/lists/numbers (what weights_only loading accepts)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save(obj, path)


def load_torch(path: str):
    """torch.load(weights_only=True): tensors and plain containers only, never pickled code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - UnpicklingError and friends: refuse with the file named
        raise CheckpointError(f"{path}: refused to load ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}); only plain tensors and "
                              "containers are accepted (weights_only=True)") from None


def capture_rng(generators: dict[str, torch.Generator]) -> dict:
    """Every random generator a step uses: torch (CPU and CUDA), python `random`, numpy, and
    the named torch.Generators (e.g. the actor's and critic's mini-batch shufflers).
    Python/numpy states become int64 tensors so the file loads with weights_only=True."""
    version, mt, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
        "python": {"version": int(version), "state": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
        "generators": {name: g.get_state() for name, g in generators.items()},
    }
    try:
        import numpy as np

        key, arr, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {"key": str(key), "state": torch.from_numpy(arr.astype(np.int64)), "pos": int(pos),
                          "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    except ImportError:
        pass
    return state


def restore_rng(state: dict, generators: dict[str, torch.Generator]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    if "numpy" in state:
        import numpy as np

        n = state["numpy"]
        np.random.set_state((n["key"], n["state"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
    for name, g in generators.items():
        if name in state["generators"]:
            g.set_state(state["generators"][name])


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------


def is_peft_model(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def _save_folder_atomically(model, tokenizer, path: str, merge_lora: bool) -> str:
    """save_pretrained into a temporary folder next to `path`, fsync, then move each file
    in with an atomic rename (a crash never leaves a half-written file under its name)."""
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, f".tmp-save-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _save_pretrained(model, tokenizer, tmp, merge_lora=merge_lora)
        _fsync_tree(tmp)
        for rel in _files_under(tmp):
            os.makedirs(os.path.dirname(os.path.join(path, rel)), exist_ok=True)
            os.replace(os.path.join(tmp, rel), os.path.join(path, rel))
        fsync_path(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def save_hf_model(model, tokenizer, path: str) -> str:
    """safetensors weights + config + tokenizer: loadable by AutoModelForCausalLM and vLLM.

    A PeftModel is merged into its base first (on a copy; the training model keeps its
    adapters), so the folder is a plain model. Files are written into a temporary folder
    next to `path` and moved in one by one with an atomic rename each.
    """
    return _save_folder_atomically(model, tokenizer, path, merge_lora=True)


def save_lora_adapters(model, tokenizer, path: str) -> str:
    """PEFT adapter folder (adapter_model.safetensors + adapter_config.json + tokenizer),
    loadable with `PeftModel.from_pretrained(base, path)`. Atomic like `save_hf_model`."""
    if not is_peft_model(model):
        raise CheckpointError("checkpoint.save_mode: 'lora' saves LoRA adapters, but the actor is not a LoRA "
                              "(peft) model; set model.lora.rank > 0 or use --save_actor_only")
    return _save_folder_atomically(model, tokenizer, path, merge_lora=False)


def _save_pretrained(model, tokenizer, path: str, merge_lora: bool) -> None:
    os.makedirs(path, exist_ok=True)
    if is_peft_model(model) and merge_lora:
        import copy

        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(path, safe_serialization=True)
        del merged
    else:
        model.save_pretrained(path, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)


def _fsync_tree(folder: str) -> None:
    for rel in _files_under(folder):
        fsync_path(os.path.join(folder, rel))
    for root, dirs, _ in os.walk(folder):
        for d in dirs:
            fsync_path(os.path.join(root, d))
    fsync_path(folder)


def load_module_weights(model: torch.nn.Module, folder: str) -> None:
    """Load the safetensors in `folder` (written by `save_pretrained` or `save_module`) into
    `model` in place, so optimizers keep pointing at the same parameters.

    Keys absent from the files are allowed only for tied parameters (e.g. GPT-2's lm_head,
    which shares the embedding); anything else missing or unexpected is an error.
    """
    from safetensors.torch import load_file

    if is_peft_model(model) and os.path.exists(os.path.join(folder, "adapter_model.safetensors")):
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, load_file(os.path.join(folder, "adapter_model.safetensors")))
        unexpected = getattr(result, "unexpected_keys", []) or []
        if unexpected:
            raise CheckpointError(f"{folder}: adapter weights that the model does not have: {unexpected[:5]}")
        return
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise CheckpointError(f"{folder}: no .safetensors weights")
    state = {}
    for f in files:
        state.update(load_file(f))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise CheckpointError(f"{folder}: weights the model does not have: {list(unexpected)[:5]}")
    if missing:
        by_name = dict(model.named_parameters(remove_duplicate=False))
        by_name.update(dict(model.named_buffers(remove_duplicate=False)))
        loaded_ids = {id(by_name[k]) for k in state if k in by_name}
        untied = [k for k in missing if k not in by_name or id(by_name[k]) not in loaded_ids]
        # Non-persistent buffers never reach state_dict; only parameters/persistent buffers count.
        untied = [k for k in untied if k in dict(model.state_dict())]
        if untied:
            raise CheckpointError(f"{folder}: weights missing from the checkpoint: {untied[:5]}")


def save_module(model: torch.nn.Module, path: str) -> None:
    """A plain nn.Module (e.g. the critic's value model) as one safetensors file."""
    from safetensors.torch import save_model

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_model(model, path)


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
            _fsync_tree(tmp)
            files = {rel: {"size": os.path.getsize(os.path.join(tmp, rel)),
                           "sha256": sha256_file(os.path.join(tmp, rel))} for rel in _files_under(tmp)}
            manifest = {"format": FORMAT_VERSION, "step": int(step), "kind": kind, "files": files,
                        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            manifest.update(meta or {})
            manifest.update(extra)
            atomic_write_json(os.path.join(tmp, MANIFEST), manifest)  # last file: marks the folder complete
            trash = None
            if os.path.exists(final):  # the same step saved again (e.g. after a resume)
                trash = os.path.join(self.root, f".trash-{name}-{os.getpid()}")
                shutil.rmtree(trash, ignore_errors=True)
                os.rename(final, trash)
            os.rename(tmp, final)
            fsync_path(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if trash:
            shutil.rmtree(trash, ignore_errors=True)
        # Pointers last: until here they still name the previous (complete) checkpoint.
        atomic_write_text(os.path.join(self.root, "latest"), name + "\n")
        if kind == "full":
            atomic_write_text(os.path.join(self.root, "latest_full"), name + "\n")
        if prune:
            self.prune()
        return final

    # ------------------------------------------------------------ reading
    def list(self) -> list[tuple[int, str]]:
        """(step, path) of every completed checkpoint folder (one with a manifest), oldest first."""
        if not os.path.isdir(self.root):
            return []
        out = []
        for name in os.listdir(self.root):
            m = STEP_RE.match(name)
            path = os.path.join(self.root, name)
            if m and os.path.isfile(os.path.join(path, MANIFEST)):
                out.append((int(m.group(1)), path))
        return sorted(out)

    def pointer(self, which: str = "latest") -> Optional[str]:
        path = os.path.join(self.root, which)
        if not os.path.isfile(path):
            return None
        name = open(path, encoding="utf-8").read().strip()
        return os.path.join(self.root, name) if STEP_RE.match(name) else None

    def find_latest(self, kind: Optional[str] = "full", checksums: bool = True,
                    warn: Callable[[str], None] = print) -> Optional[str]:
        """The newest checkpoint of `kind` (None = any) that verifies; the pointer is tried
        first, then every folder newest first (a corrupted one is skipped with a warning)."""
        candidates = []
        ptr = self.pointer("latest_full" if kind == "full" else "latest")
        if ptr:
            candidates.append(ptr)
        candidates += [p for _, p in reversed(self.list()) if p not in candidates]
        for path in candidates:
            if not os.path.isdir(path):
                continue
            try:
                manifest = verify_checkpoint(path, checksums=checksums)
            except CheckpointError as exc:
                warn(f"warning: skipping checkpoint {path}: {exc}")
                continue
            if kind is None or manifest.get("kind") == kind:
                return path
        return None

    # ------------------------------------------------------------ pruning
    def prune(self) -> None:
        """Keep the newest `keep_last` checkpoints of each kind (and whatever a pointer names);
        remove leftovers of interrupted saves from processes that are gone."""
        keep = {self.pointer("latest"), self.pointer("latest_full")}
        by_kind: dict[str, list[str]] = {}
        for _, path in reversed(self.list()):
            try:
                kind = read_manifest(path).get("kind", "full")
            except CheckpointError:
                continue
            by_kind.setdefault(kind, []).append(path)
        for paths in by_kind.values():
            for path in paths[self.keep_last:]:
                if path not in keep:
                    # Rename first: a crash mid-delete leaves a temp name, never a half checkpoint.
                    trash = os.path.join(self.root, f".trash-{os.path.basename(path)}-{os.getpid()}")
                    os.rename(path, trash)
                    shutil.rmtree(trash, ignore_errors=True)
        for name in os.listdir(self.root):
            m = re.match(r"^\.(tmp|trash)-step_\d+-(\d+)$", name)
            if m and not _pid_alive(int(m.group(2))):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)


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
