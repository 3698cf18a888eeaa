"""Durable files: writes that a crash or `kill -9` leaves either old or new, never half, plus
checksums and weights_only torch files. The building blocks of verl.checkpoint.manager."""

from __future__ import annotations

import hashlib
import json
import os

import torch


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupted or of the wrong kind (message says which)."""


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


def test_kill_point(name: str) -> None:
    """TEST-ONLY crash hook. With VERL_TEST_KILL_AT=<name>:<n> in the environment, the n-th
    time this process reaches the point `name` (1-based) it SIGKILLs itself, as a power cut
    or `kill -9` would. Unset (always, outside tests/reliability/test_reliability_kill.py) it does nothing.
    Points: docs/reliability.md, "Crash points"."""
    spec = os.environ.get("VERL_TEST_KILL_AT")
    if not spec:
        return
    point, _, nth = spec.rpartition(":")
    if point != name:
        return
    _KILL_HITS[name] = _KILL_HITS.get(name, 0) + 1
    if _KILL_HITS[name] == int(nth):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


_KILL_HITS: dict = {}  # point -> times reached in this process (test_kill_point only)


def atomic_write_text(path: str, text: str) -> None:
    """Write `text` to `path` so that readers see the old or the new content, never a mix.
    An error removes the temp file; a crash leaves `<path>.tmp-<pid>`, which the next run
    in the folder removes (verl.checkpoint.run_folder.clean_stale_temps)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        test_kill_point(f"tmp:{os.path.basename(path)}")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_path(folder)


def atomic_write_json(path: str, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def files_under(folder: str) -> list[str]:
    out = []
    for root, _, names in os.walk(folder):
        for name in names:
            out.append(os.path.relpath(os.path.join(root, name), folder))
    return sorted(out)


def fsync_tree(folder: str) -> None:
    for rel in files_under(folder):
        fsync_path(os.path.join(folder, rel))
    for root, dirs, _ in os.walk(folder):
        for d in dirs:
            fsync_path(os.path.join(root, d))
    fsync_path(folder)


# Torch objects with weights_only-loadable contents


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
