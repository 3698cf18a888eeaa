"""One run per folder: `save_dir/.verl.lock`, held with `fcntl.flock` for the life of the run.

    lock = hold_run_folder(save_dir)         # ConfigError (exit 2) when another process holds it
    lock.adopt(owner)                        # the run (RunLifecycle) that will release it
    lock.release(owner)                      # at the run's end; the OS releases it on any exit

The lock is the kernel's, on an open file: when the process ends in any way (exit, exception,
`kill -9`, a power cut) it is gone, so a crashed run never leaves a stale lock behind; the
file itself stays (deleting it would race with a process that just opened it) and only says
who held it last. The file records pid, host, start time and command line, which the refusal
message names.

Within one process the lock is shared: the CLI takes it before it reads the folder, the
Trainer it builds adopts it. A second Trainer on the same folder in the same process (a
notebook re-running a cell after an error) takes it over from the first, with a note.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
import weakref
from typing import Callable, Optional

from verl.errors import ConfigError
from verl.redact import redact

LOCK_NAME = ".verl.lock"


class RunLock:
    def __init__(self, folder: str, shown: Optional[str] = None):
        self.folder = folder  # its real path (the registry's key)
        self.shown = shown or folder  # as the user wrote it, for messages
        self.path = os.path.join(folder, LOCK_NAME)
        self.fd: Optional[int] = None
        self._owner: Optional[weakref.ref] = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"checkpoint.save_dir: {self.shown} is not writable ({exc.strerror}); "
                              "choose another --save_dir") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(fd)
            os.close(fd)
            raise ConfigError(f"checkpoint.save_dir: {self.shown} is in use by {holder}; wait for it, or use "
                              "another --save_dir") from None
        except OSError as exc:  # a file system without locks: say so rather than run unprotected
            os.close(fd)
            raise ConfigError(f"checkpoint.save_dir: cannot lock {self.path} ({exc.strerror}); use a --save_dir on "
                              "a local file system") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": redact(" ".join(sys.argv))}  # a URL's password stays out of the file
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        self.fd = fd

    def owner(self):
        return self._owner() if self._owner is not None else None

    def adopt(self, owner, say: Callable[[str], None] = print) -> None:
        """`owner` (a RunLifecycle) is now the run that holds the folder and releases it."""
        previous = self.owner()
        if previous is not None and previous is not owner:
            say(f"note: {self.shown} was held by an earlier Trainer of this process that did not finish; "
                "this one takes it over (the earlier one must not train further)")
        self._owner = weakref.ref(owner, lambda _ref, lock=self: lock._owner_gone(_ref))

    def _owner_gone(self, ref) -> None:
        if self._owner is ref:  # the run was garbage-collected without finishing
            self.release()

    def release(self, owner=None) -> None:
        """Let go of the folder; with `owner`, only if that run still holds it."""
        if owner is not None and self.owner() is not owner:
            return
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
            self.fd = None
        self._owner = None
        if _HELD.get(self.folder) is self:
            del _HELD[self.folder]


def _describe(fd: int) -> str:
    """'pid N on HOST (started ..., command ...)' from the lock file, as far as it says."""
    try:
        info = json.loads(os.pread(fd, 65536, 0).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info.get("pid"):
        return "another process"  # it is between taking the lock and writing its details
    host = f" on {info['host']}" if info.get("host") and info["host"] != socket.gethostname() else ""
    return f"pid {info['pid']}{host} (started {info.get('started', '?')}, command: {info.get('command', '?')})"


_HELD: dict[str, RunLock] = {}  # real path of a folder -> the lock this process holds on it


def hold_run_folder(folder: str) -> RunLock:
    """The lock on `folder` (an existing folder), taken now or already held by this process."""
    key = os.path.realpath(folder)
    lock = _HELD.get(key)
    if lock is None or not lock.held:
        lock = RunLock(key, shown=folder)
        lock.acquire()
        _HELD[key] = lock
    return lock


def held_lock(folder: str) -> Optional[RunLock]:
    lock = _HELD.get(os.path.realpath(folder))
    return lock if lock is not None and lock.held else None
