"""What runs inside the sandbox (verl/agents/sandbox.py): one bootstrap script, handed to
`python -I -S -c BOOTSTRAP CONFIG_JSON`. It reads its config (mode, limits, paths, the code), builds the
jail where the mode has one (mounts, chroot, dropped capabilities, uid 65534), or installs the plain
mode's audit hook, sets the resource limits, and runs the model's code. Kept as source text because it
runs in a fresh interpreter with no site-packages (only the standard library), not as an import of ours.
"""

BOOTSTRAP = r'''
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
