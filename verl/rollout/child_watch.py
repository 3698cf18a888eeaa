"""Watch the processes an engine started (SGLang's scheduler and detokenizer) and act within about a
second when one of them dies, whatever killed it.

    before = child_pids()
    engine = sglang.Engine(...)                     # starts its processes
    watch = ChildWatch(child_pids() - before, on_death=lambda dead: ...).start()
    ...
    watch.stop()                                    # before shutting the engine down on purpose

A process killed with SIGKILL (out-of-memory killer, a crash below Python) cannot tell its parent;
without a watch the parent's next request waits on a socket nobody answers. Linux only (/proc); on
other systems the watch sees no processes and does nothing.

Written here rather than with psutil (not one of verl's dependencies): two /proc reads. The watch
never reaps a child (no waitpid): the engine's own process handles stay valid.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Optional


def child_pids(parent: Optional[int] = None) -> set[int]:
    """The live children of `parent` (default: this process), from /proc/<pid>/stat."""
    parent = os.getpid() if parent is None else parent
    out = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[1] == parent and stat[0] != "Z":
                out.add(int(entry))
    return out


def _stat(pid: int) -> Optional[tuple[str, int]]:
    """(state letter, parent pid) of `pid`, None when it no longer exists. /proc/<pid>/stat is
    "pid (comm) state ppid ...", where comm may itself hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def process_name(pid: int) -> str:
    """Its command line as the process set it (SGLang titles its own: "sglang::scheduler"), else its comm."""
    for path in (f"/proc/{pid}/cmdline", f"/proc/{pid}/comm"):
        try:
            with open(path, "rb") as fh:
                text = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if text:
            return text[:80]
    return "?"


class ChildWatch:
    """A daemon thread that polls `pids` every `interval_s` and calls `on_death([(pid, name), ...])`
    once, from that thread, for the ones that are gone or zombies (a dead child its parent has not
    reaped yet)."""

    def __init__(self, pids, on_death: Callable[[list], None], interval_s: float = 1.0):
        self.names = {pid: process_name(pid) for pid in sorted(pids)}
        self.on_death, self.interval_s = on_death, interval_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def dead(self) -> list[tuple[int, str]]:
        out = []
        for pid, name in self.names.items():
            stat = _stat(pid)
            if stat is None or stat[0] in ("Z", "X"):
                out.append((pid, name))
        return out

    def start(self) -> "ChildWatch":
        if self.names:
            self._thread = threading.Thread(target=self._run, name="verl-child-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            dead = self.dead()
            if dead:
                self.on_death(dead)
                return
