"""Run untrusted Python (the model's code) in a separate, locked-down process: `run_python`.

Every run gets a fresh process (`sys.executable -I -S`: isolated mode, no site-packages, so only
the standard library), a fresh working directory (its cwd, removed afterwards), an environment of
five fixed variables (PATH, HOME, TMPDIR, LANG, LC_ALL: nothing from `os.environ` reaches it),
stdin on /dev/null, stdout/stderr captured to files and cut to `max_output_chars` each, and:

* wall clock: `timeout_s`, then SIGKILL to the whole process group (and, in the jail, the whole PID
  namespace, so children that called setsid die too); `SandboxResult.timed_out` says so. Should the
  host process die first, the sandbox ends itself 10 s after its timeout (an alarm in the jail's
  PID 1; in plain mode a SIGALRM the code could override);
* CPU: RLIMIT_CPU = `cpu_s` (SIGXCPU, then SIGKILL one second later);
* memory: RLIMIT_AS = `memory_mb` (an allocation past it raises MemoryError);
* files: RLIMIT_FSIZE = 16 MiB per file, RLIMIT_CORE = 0, RLIMIT_NOFILE = 256.

How much more is enforced depends on what the machine allows; `sandbox_info()` says which mode is
in use (probed once per process, with a trivial script):

"jail" (running as root, or "jail-userns" as any user where unprivileged user namespaces are
allowed): the process starts under `unshare --net --mount --pid --ipc --uts --fork --kill-child`
(plus `--user --map-root-user` for jail-userns) and, before any of the model's code runs, builds
a chroot of its own in that mount namespace:
  - network: a new network namespace holding only a loopback device that is down, so every
    connect() fails (ENETUNREACH), to the internet and to sockets listening on the host's
    127.0.0.1 alike; abstract unix sockets are per network namespace, so those are out of reach too;
  - files: the chroot holds /usr (with the /bin, /lib... links or binds), the Python installation
    (sys.base_prefix / sys.prefix) bound read-only, /dev/{null,zero,full,random,urandom}, a fresh
    /proc of its own PID namespace, and /sandbox (the cwd), /tmp and /dev/shm on one private tmpfs
    of `disk_mb` (64 MiB) that disappears with the namespace. Nothing else of the host's file system
    exists there: the host's /etc, /home, /root, the project tree, other processes' /proc/<pid>
    entries (and so their environments) cannot be read, and nothing outside /sandbox, /tmp and
    /dev/shm can be written (the other mounts are read-only, the chroot's own root too);
  - privileges: in "jail" the code runs as uid/gid 65534 (nobody), no supplementary groups, with
    RLIMIT_NPROC = 64 (a fork bomb stops there); in both, every capability is dropped (bounding
    set included) and no_new_privs is set before the code runs, so it cannot remount, chroot
    back out, or gain privileges through a setuid binary.
  Reading the standard library and /usr is allowed (the interpreter needs them).

"plain" (no namespaces available: unshare missing, or not permitted): only the limits in the list
above, plus an audit hook (PEP 578) installed before the code runs that refuses socket
connect/bind/sendto and name lookups, opening for writing (or creating, removing, renaming,
chmod-ing) anything outside the working directory, opening directories outside it, starting
processes (fork, exec, spawn, subprocess, os.system), sending signals, and loading ctypes. That
is best effort, not isolation: the code runs as the trainer's user, may read whatever that user
can (including /proc/<pid>/environ of the user's other processes), and an audit hook can be
defeated by sufficiently clever Python. Use it only where the model's code is trusted as much as
the data is. In the jail no hook is installed: there the kernel refuses all of it (the tests check
the kernel's refusals, not a hook's), and ctypes and subprocess work within the jail's limits.

Not enforced in any mode: a limit on CPU *share* (a busy sandbox competes with the trainer for
cores until its cpu_s runs out), and a limit on total memory beyond each process's RLIMIT_AS.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Optional

from verl.agents.sandbox_bootstrap import BOOTSTRAP

FILE_SIZE_LIMIT = 16 * 1024 * 1024  # RLIMIT_FSIZE: any one file the code writes, stdout/stderr included
NPROC_LIMIT = 64  # RLIMIT_NPROC for uid 65534 in the root jail
SANDBOX_UID = 65534  # nobody
ORPHAN_GRACE_S = 10  # a sandbox whose host died ends itself this long after its timeout
MODES = ("jail", "jail-userns", "plain")
TRUNCATION_MARKER = "\n[... output truncated]"


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    returncode: Optional[int]  # as subprocess reports it (-N: killed by signal N); None when it timed out
    timed_out: bool
    truncated: bool  # stdout or stderr was cut to max_output_chars
    seconds: float


# ---------------------------------------------------------------------------
# The host side
# ---------------------------------------------------------------------------

_mode_lock = threading.Lock()
_mode: Optional[str] = None  # the probed mode, once known
_mode_reason = ""  # why the stronger modes were not used
_force_mode: Optional[str] = None  # tests set this to exercise one mode


def _env(home: str) -> dict:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home if home != "/sandbox" else "/tmp",
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _python_dirs() -> list[str]:
    """The interpreter's installation directories the jail must show (those outside /usr)."""
    dirs = []
    for path in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))):
        path = os.path.realpath(path)
        if path == "/" or path.startswith("/usr/") or path == "/usr":
            continue
        if not any(path == d or path.startswith(d + "/") for d in dirs):
            dirs = [d for d in dirs if not d.startswith(path + "/")] + [path]
    return dirs


def _command(mode: str, config: dict) -> list[str]:
    python = [sys.executable, "-I", "-S", "-c", BOOTSTRAP, json.dumps(config)]
    if mode == "plain":
        return python
    ns = ["unshare", "--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child"]
    if mode == "jail-userns":
        ns += ["--user", "--map-root-user"]
    return ns + python


def _read(path: str, limit: int) -> tuple[str, bool]:
    """The first `limit` characters of a captured stream, and whether there were more."""
    with open(path, "rb") as f:
        data = f.read(4 * limit + 4)  # UTF-8 takes at most 4 bytes a character
        more = bool(f.read(1))
    text = data.decode("utf-8", errors="replace")
    if more or len(text) > limit:
        return text[:limit] + TRUNCATION_MARKER, True
    return text, False


def _remove(path: str) -> None:
    def unlock(fn, p, _):  # the code may have chmod-ed its files to 000 (plain mode)
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            fn(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlock)


def _run(mode: str, code: str, timeout_s: float, cpu_s: float, memory_mb: int, max_output_chars: int,
         disk_mb: int) -> SandboxResult:
    start = time.monotonic()
    root = tempfile.mkdtemp(prefix="verl-sandbox-")
    try:
        work = os.path.join(root, "work")
        for name in ("work", "jail", "scratch"):
            os.mkdir(os.path.join(root, name))
        with open(os.path.join(work if mode == "plain" else root, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        open(os.path.join(root, "status"), "w").close()
        config = {"mode": mode, "root": root, "cpu_s": max(1, int(round(cpu_s))),
                  "memory_bytes": int(memory_mb) * 1024 * 1024, "fsize_bytes": FILE_SIZE_LIMIT,
                  "nproc": NPROC_LIMIT if mode == "jail" else 0, "uid": SANDBOX_UID if mode == "jail" else None,
                  "python_dirs": _python_dirs(), "disk_mb": int(disk_mb),
                  "deadline_s": int(timeout_s) + ORPHAN_GRACE_S}
        out_path, err_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(_command(mode, config), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    cwd=work, env=_env(work if mode == "plain" else "/sandbox"),
                                    start_new_session=True, close_fds=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a finished run too (plain mode)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        returncode: Optional[int] = None
        if not timed_out:
            with open(os.path.join(root, "status")) as f:
                reported = f.read().strip()
            returncode = int(reported) if reported else proc.returncode
        stdout, cut_out = _read(out_path, max_output_chars)
        stderr, cut_err = _read(err_path, max_output_chars)
        return SandboxResult(stdout=stdout, stderr=stderr, returncode=returncode, timed_out=timed_out,
                             truncated=cut_out or cut_err, seconds=time.monotonic() - start)
    finally:
        _remove(root)


def _probe() -> tuple[str, str]:
    """The strongest mode that runs a trivial script here, and why stronger ones did not."""
    reasons = []
    candidates = []
    if shutil.which("unshare") is None:
        reasons.append("no `unshare` binary (util-linux) on PATH")
    else:
        if os.geteuid() == 0:
            candidates.append("jail")
        candidates.append("jail-userns")
    for mode in candidates:
        try:
            res = _run(mode, "print('ok')", timeout_s=20, cpu_s=5, memory_mb=512, max_output_chars=2000, disk_mb=1)
        except OSError as exc:
            reasons.append(f"{mode}: {exc}")
            continue
        if res.returncode == 0 and res.stdout == "ok\n":
            return mode, "; ".join(reasons)
        reasons.append(f"{mode}: exit {res.returncode}, {(res.stderr or res.stdout).strip()[-300:]}")
    return "plain", "; ".join(reasons)


def sandbox_mode() -> str:
    """The mode run_python uses in this process (see the module docstring): probed on first use."""
    global _mode, _mode_reason
    if _force_mode is not None:
        return _force_mode
    with _mode_lock:
        if _mode is None:
            _mode, _mode_reason = _probe()
        return _mode


def sandbox_info() -> dict:
    """{'mode': ..., 'network': ..., 'files': ..., 'user': ..., 'reason': ...}: what is enforced here."""
    mode = sandbox_mode()
    jail = mode != "plain"
    return {
        "mode": mode,
        "network": "network namespace (loopback down)" if jail else "audit hook (best effort)",
        "files": ("chroot: read-only /usr and Python, private tmpfs /sandbox /tmp /dev/shm" if jail
                  else "audit hook refuses writes outside the working directory (best effort)"),
        "user": {"jail": "uid 65534, no capabilities", "jail-userns": "user namespace, no capabilities",
                 "plain": "the trainer's user"}[mode],
        "limits": "wall clock (process group / PID namespace killed), RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE"
                  + (", RLIMIT_NPROC" if mode == "jail" else ""),
        "reason": _mode_reason,
    }


def run_python(code: str, timeout_s: float = 5.0, cpu_s: float = 5.0, memory_mb: int = 512,
               max_output_chars: int = 4000, disk_mb: int = 64) -> SandboxResult:
    """Run `code` as a script in a fresh sandboxed process (module docstring) and return what it did.

    Never raises for anything the code does (exceptions, crashes, hangs, limits hit show in the
    result); `disk_mb` sizes the jail's private tmpfs (cwd, /tmp and /dev/shm together).
    """
    mode = sandbox_mode()
    if mode not in MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}; one of {', '.join(MODES)}")
    return _run(mode, code, timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb,
                max_output_chars=max_output_chars, disk_mb=disk_mb)
