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
# What runs inside: one bootstrap script, handed to `python -I -S -c`
# ---------------------------------------------------------------------------

_BOOTSTRAP = r'''
import json, os, sys
sys.dont_write_bytecode = True
cfg = json.loads(sys.argv[1])
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_NOATIME, MS_NODIRATIME, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 16384, 1 << 18, 1 << 21


def setup_failed(what):
    os.write(2, ("sandbox setup failed: %s\n" % what).encode())
    os._exit(125)


def limits():
    import resource
    def cap(res, value, soft=None):
        old_soft, old_hard = resource.getrlimit(res)
        hard = value if old_hard == resource.RLIM_INFINITY else min(value, old_hard)
        resource.setrlimit(res, (min(hard, value if soft is None else soft), hard))
    cap(resource.RLIMIT_CPU, cfg["cpu_s"] + 1, soft=cfg["cpu_s"])
    cap(resource.RLIMIT_AS, cfg["memory_bytes"])
    cap(resource.RLIMIT_FSIZE, cfg["fsize_bytes"])
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_NOFILE, 256)
    if cfg["nproc"]:
        cap(resource.RLIMIT_NPROC, cfg["nproc"])


def audit_hook(workdir):
    """Plain mode only (the jail's kernel mechanisms make it moot there): refuse the network, writes
    outside the working directory, processes, signals and ctypes. Best effort (module docstring)."""
    banned = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
              "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo", "os.system", "os.exec",
              "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "os.kill", "os.killpg",
              "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.addressof", "ctypes.cdata",
              "ctypes.call_function", "sys.settrace", "sys.setprofile"}
    paths = {"os.remove": (0,), "os.rename": (0, 1), "os.mkdir": (0,), "os.rmdir": (0,), "os.symlink": (1,),
             "os.link": (1,), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
             "os.chflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,)}
    realpath, isdir, fspath, readlink = os.path.realpath, os.path.isdir, os.fspath, os.readlink
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    root = realpath(workdir)

    def outside(path):
        if isinstance(path, int):
            try:
                path = readlink("/proc/self/fd/%d" % path)
            except OSError:
                return True
        path = realpath(fspath(path))
        return path != root and not path.startswith(root + "/")

    def refuse(path):
        raise PermissionError("this sandbox may only write in its working directory: %r" % (path,))

    def hook(event, args):
        if event in banned:
            raise PermissionError("%s is not allowed in this sandbox" % event)
        if event == "open" and args[0] is not None:
            path, mode, flags = args[0], args[1] or "", args[2] or 0
            writing = any(c in mode for c in "wax+") or flags & WRITE
            if writing and outside(path):
                refuse(path)
            if not isinstance(path, int) and isdir(path) and outside(path):  # no dir_fd to write through
                raise PermissionError("this sandbox may not open directories outside its working directory")
        elif event in paths:
            for i in paths[event]:
                if i < len(args) and args[i] is not None and outside(args[i]):
                    refuse(args[i])

    sys.addaudithook(hook)


def run_code():
    """Run main.py (in the cwd) as __main__, exiting like `python main.py` would."""
    import builtins, traceback
    with open("main.py", encoding="utf-8") as f:
        source = f.read()
    limits()
    if cfg["mode"] == "plain":
        import signal
        signal.alarm(cfg["deadline_s"])  # SIGALRM ends the process should the host die (best effort)
        audit_hook(os.getcwd())
    sys.argv = ["main.py"]
    scope = {"__name__": "__main__", "__file__": "main.py", "__builtins__": builtins}
    try:
        exec(compile(source, "main.py", "exec"), scope)
    except SystemExit:
        raise
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        sys.exit(1)
    sys.exit(0)


def jail():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    enc = lambda s: None if s is None else s.encode()

    def mount(src, dst, fstype, flags, data=None):
        if libc.mount(enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "mount %s on %s: %s" % (src, dst, os.strerror(err)))

    def kept_flags(path):  # a remount in a user namespace must keep the flags the host mount has
        f, out = os.statvfs(path).f_flag, MS_NOSUID
        for st, ms in ((os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME),
                       (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME)):
            out |= ms if f & st else 0
        return out

    def bind(src, dst, readonly=True):
        mount(src, dst, None, MS_BIND)
        mount(None, dst, None, MS_BIND | MS_REMOUNT | kept_flags(src) | (MS_RDONLY if readonly else 0))

    os.umask(0o022)
    root, uid = cfg["root"], cfg["uid"]
    with open(os.path.join(root, "main.py"), encoding="utf-8") as f:
        source = f.read()
    status = os.open(os.path.join(root, "status"), os.O_WRONLY)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    new, scratch = os.path.join(root, "jail"), os.path.join(root, "scratch")
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "size=%dm,nr_inodes=16384,mode=755" % cfg["disk_mb"])
    for name, mode in (("work", 0o700), ("tmp", 0o1777), ("shm", 0o1777)):
        os.mkdir(os.path.join(scratch, name))
        os.chmod(os.path.join(scratch, name), mode)
    with open(os.path.join(scratch, "work", "main.py"), "w", encoding="utf-8") as f:
        f.write(source)
    if uid is not None:
        os.chown(os.path.join(scratch, "work"), uid, uid)
        os.chown(os.path.join(scratch, "work", "main.py"), uid, uid)
    for name in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            os.symlink(os.readlink(path), new + path)
        elif os.path.isdir(path):
            os.mkdir(new + path)
            bind(path, new + path)
    for path in cfg["python_dirs"]:
        if not os.path.exists(new + path):
            os.makedirs(new + path)
            bind(path, new + path)
    os.mkdir(new + "/dev")
    for name in ("null", "zero", "full", "random", "urandom"):
        open(new + "/dev/" + name, "w").close()
        mount("/dev/" + name, new + "/dev/" + name, None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, new + "/dev/" + name)
    for name, where in (("work", "/sandbox"), ("tmp", "/tmp"), ("shm", "/dev/shm")):
        os.mkdir(new + where)
        bind(os.path.join(scratch, name), new + where, readonly=False)
    os.mkdir(new + "/proc")
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, new, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chroot(new)
    os.chdir("/sandbox")

    pid = os.fork()
    if pid:  # PID 1 of the namespace: wait for the code, report how it ended; its exit ends them all
        import signal
        signal.signal(signal.SIGALRM, lambda *_: os._exit(124))  # the host died: end on our own
        signal.alarm(cfg["deadline_s"])
        while True:
            try:
                done, wstatus = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(0)
            if done == pid:
                os.write(status, str(os.waitstatus_to_exitcode(wstatus)).encode())
                os._exit(0)
    os.close(status)
    PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 38, 47
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:
        setup_failed("capset: " + os.strerror(ctypes.get_errno()))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        setup_failed("no_new_privs: " + os.strerror(ctypes.get_errno()))
    with open("/proc/self/status") as f:
        caps = {k: v.strip() for k, v in (line.split(":", 1) for line in f) if k.startswith("Cap")}
    if any(int(caps[k], 16) for k in ("CapEff", "CapPrm", "CapBnd")):
        setup_failed("capabilities still held: %r" % caps)
    if uid is not None and (os.getuid(), os.geteuid(), os.getgid()) != (uid, uid, uid):
        setup_failed("still uid %d" % os.getuid())


if cfg["mode"] != "plain":
    try:
        jail()
    except Exception as exc:
        setup_failed("%s: %s" % (type(exc).__name__, exc))
run_code()
'''


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
    python = [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(config)]
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
