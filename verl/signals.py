"""Stopping on SIGINT/SIGTERM within a bounded time (`checkpoint.stop_grace_s`).

    with GracefulStop(grace_s=20):      # `verl train` wraps the run in this
        trainer.train()

First signal: `stop_requested()` becomes the signal's name, one line says what happens next, and
a watchdog starts. The run stops at the first safe point it reaches:

  * after a step (RunLifecycle.after_step): that step's full state is saved, then `StopTraining`;
  * in the step's generation (Hugging Face engine: at the next token; between chunks of rows): the
    step is abandoned before its update, so a long generation never holds the stop up;
  * in a wait that can be abandoned, which raises `Interrupted`: validation, between its batches
    (at once: it has nothing to save); a reward call still running grace_s / 2 after the signal
    (a slow or hung function); the start of a model load. A step abandoned in its reward call has
    not updated anything yet: RunLifecycle saves the state of the last completed step (nothing before
    step 1) and raises `StopTraining`.

The CLI prints StopTraining's message and exits 0.

Watchdog: if the process still runs `grace_s` seconds after the first signal (its main thread stuck
in a C call, a user function, a long generation), it prints one line saying what was saved and
exits with 128 + the signal number (143 for SIGTERM, 130 for SIGINT). A checkpoint being written
at that moment may finish first, for at most another `grace_s` (cutting it would lose it anyway,
and checkpoints are atomic: the previous one is intact either way). A second signal exits at once,
with the same code.

Signals reach a listener thread through `signal.set_wakeup_fd` (Python's C-level handler writes
the signal number to a socket at once), so the watchdog starts even while the main thread is
inside a C call that never returns to the interpreter, where a Python-level handler cannot run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from typing import Optional

DEFAULT_GRACE_S = 20.0  # schedulers send SIGKILL ~30 s after SIGTERM (Slurm's KillWait, Kubernetes' grace period)

_REQUESTED: Optional[str] = None  # name of the first signal received, while a GracefulStop is active
_REQUESTED_AT: Optional[float] = None  # time.monotonic() of that signal
_GRACE_S = DEFAULT_GRACE_S
_PHASE: Optional[str] = None  # what the run is busy with, for the watchdog's line
_SAVING = 0  # checkpoint writes in progress
_SAVED_AFTER_STOP: Optional[str] = None  # a checkpoint completed after the first signal
_LAST_CHECKPOINT: Optional[str] = None  # the newest complete checkpoint this run knows of
_LAST_RESUMABLE: Optional[str] = None  # the newest complete full-state checkpoint this run knows of
_LOCK = threading.Lock()
_WATCHDOG_CANCEL: Optional[threading.Event] = None
_LISTENER_FD: Optional[int] = None  # the wakeup fd a listener thread reads (else the Python handler acts)


class StopTraining(Exception):
    """Raised after a stop was requested and what could be saved was saved; the message says what."""


class Interrupted(BaseException):
    """A wait noticed a stop request and gave up (`where` names it). Not an `Exception`, so that
    the `except Exception` of reward and validation code passes it through to the trainer,
    which saves what can be saved and turns it into `StopTraining`."""

    def __init__(self, where: str):
        super().__init__(f"stopped by {_REQUESTED or 'a stop request'} during {where}")
        self.where = where


def stop_requested() -> Optional[str]:
    """The signal name ('SIGINT', 'SIGTERM') if a graceful stop was requested, else None."""
    return _REQUESTED


def request_stop(name: str = "request") -> None:
    """Ask the running trainer to stop at its next safe point (what a signal does, minus the watchdog)."""
    global _REQUESTED, _REQUESTED_AT
    with _LOCK:
        if _REQUESTED is None:
            _REQUESTED, _REQUESTED_AT = name, time.monotonic()


def abandon_if_stopped(where: str) -> None:
    """Raise `Interrupted(where)` when a stop was requested (a safe point of a long wait)."""
    if _REQUESTED is not None:
        raise Interrupted(where)


def grace_s() -> float:
    return _GRACE_S


def stop_overdue() -> bool:
    """A stop was requested half the grace period ago or earlier: a wait still going on by then
    (a slow or hung reward call) is abandoned, leaving the other half to save the last step."""
    at = _REQUESTED_AT
    return at is not None and time.monotonic() - at >= _GRACE_S / 2


@contextlib.contextmanager
def phase(what: str):
    """Name what the run is busy with (the watchdog's line says it)."""
    global _PHASE
    previous, _PHASE = _PHASE, what
    try:
        yield
    finally:
        _PHASE = previous


@contextlib.contextmanager
def checkpoint_write():
    """Marks a checkpoint write: the watchdog lets it finish (see the module docstring)."""
    global _SAVING
    with _LOCK:
        _SAVING += 1
    try:
        with phase("writing a checkpoint"):
            yield
    finally:
        with _LOCK:
            _SAVING -= 1


def note_checkpoint(path: str, resumable: bool = True) -> None:
    """A checkpoint at `path` is complete (after its atomic rename), or was resumed from; `resumable`:
    it holds the full state (`--resume` continues from it), not the actor's weights only."""
    global _LAST_CHECKPOINT, _SAVED_AFTER_STOP, _LAST_RESUMABLE
    _LAST_CHECKPOINT = path
    if resumable:
        _LAST_RESUMABLE = path
    if _REQUESTED is not None:
        _SAVED_AFTER_STOP = path


def resume_note() -> str:
    """Where `--resume auto` continues from, for the line printed when a run fails mid-way."""
    if _LAST_RESUMABLE:
        return f"the last full checkpoint {_LAST_RESUMABLE} is intact: rerun with --resume auto to continue from it"
    return ("this run has no full checkpoint yet (checkpoint.save_full_every=N saves one every N steps): "
            "--resume auto starts it over")


def saved_note() -> str:
    """What is on disk, for the lines printed on a forced exit."""
    if _SAVED_AFTER_STOP:
        return f"the state at the stop was saved to {_SAVED_AFTER_STOP}"
    if _LAST_CHECKPOINT:
        return (f"nothing was saved after the signal; the last completed checkpoint {_LAST_CHECKPOINT} is intact "
                "(a longer checkpoint.stop_grace_s gives the stop time to save)")
    return ("nothing was saved after the signal (this run wrote no checkpoint); a longer checkpoint.stop_grace_s "
            "gives the stop time to save, and checkpoint.save_full_every=N saves a full state every N steps")


# ---------------------------------------------------------------------------
# Receiving signals
# ---------------------------------------------------------------------------


def _say(line: str) -> None:
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr must not keep the stop from happening
        pass


def _hard_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _on_signal(signum: int) -> None:
    global _REQUESTED, _REQUESTED_AT
    name = signal.Signals(signum).name
    with _LOCK:
        first = _REQUESTED is None
        if first:
            _REQUESTED, _REQUESTED_AT = name, time.monotonic()
    if not first:
        _say(f"\n{name} again: exiting now with code {128 + signum}; {saved_note()}\n")
        _hard_exit(128 + signum)
    _say(f"\n{name} received: stopping within checkpoint.stop_grace_s={_GRACE_S:g}s: a step in its generation is "
         "abandoned and the last completed one is saved, a step in its update finishes and is saved (validation is "
         f"cut short; a reward call still running after {_GRACE_S / 2:g}s abandons the step; before step 1 there is "
         f"nothing to save). Past the limit verl exits with code {128 + signum}; the last completed checkpoint stays intact. "
         "Send the signal again to exit at once.\n")
    if _WATCHDOG_CANCEL is not None:
        threading.Thread(target=_watchdog, args=(signum, _GRACE_S, _WATCHDOG_CANCEL), name="verl-stop-watchdog",
                         daemon=True).start()


def _watchdog(signum: int, grace: float, cancel: threading.Event) -> None:
    if cancel.wait(grace):
        return
    if _SAVING:  # a checkpoint write in progress: let it finish, for at most another grace period
        until = time.monotonic() + grace
        while _SAVING and time.monotonic() < until:
            if cancel.wait(0.05):
                return
    if cancel.is_set():
        return
    name = signal.Signals(signum).name
    busy = f" (busy {_PHASE})" if _PHASE else ""
    _say(f"\n{name}: not stopped within checkpoint.stop_grace_s={grace:g}s{busy}; exiting now with code "
         f"{128 + signum}; {saved_note()}\n")
    _hard_exit(128 + signum)


def _python_handler(signum, frame) -> None:
    """Runs in the main thread once it is back in the interpreter. The listener has usually seen
    the signal already; if another library replaced the wakeup fd meanwhile, it has not (take the
    fd back and handle the signal here)."""
    if _LISTENER_FD is not None:
        try:
            previous = signal.set_wakeup_fd(_LISTENER_FD, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: cannot happen for a Python-level handler
            previous = _LISTENER_FD
        if previous == _LISTENER_FD:
            return
    _on_signal(signum)


class _Listener:
    """Reads the signal numbers Python's C handler writes to the wakeup socket, in a thread."""

    def __init__(self):
        self.rsock, self.wsock = socket.socketpair()
        self.wsock.setblocking(False)
        self.previous_fd = signal.set_wakeup_fd(self.wsock.fileno(), warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._run, name="verl-signals", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                data = self.rsock.recv(64)
            except OSError:
                return
            if not data:  # the write end was closed: GracefulStop is over
                return
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    _on_signal(signum)

    def close(self) -> None:
        signal.set_wakeup_fd(self.previous_fd)
        self.wsock.close()
        self.thread.join(timeout=5)
        self.rsock.close()


class GracefulStop:
    """Installs the handlers for SIGINT and SIGTERM (main thread only; elsewhere only
    `request_stop` works) and restores the previous ones on exit. `grace_s`: the bound from the
    first signal to the exit (`checkpoint.stop_grace_s`)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, grace_s: float = DEFAULT_GRACE_S):
        if not grace_s > 0:
            raise ValueError(f"GracefulStop: grace_s must be > 0, got {grace_s}")
        self.grace_s = float(grace_s)
        self._previous = {}
        self._listener: Optional[_Listener] = None

    def __enter__(self) -> "GracefulStop":
        global _REQUESTED, _REQUESTED_AT, _GRACE_S, _WATCHDOG_CANCEL, _LISTENER_FD
        global _SAVED_AFTER_STOP, _LAST_CHECKPOINT, _LAST_RESUMABLE
        _REQUESTED = _REQUESTED_AT = _SAVED_AFTER_STOP = _LAST_CHECKPOINT = _LAST_RESUMABLE = None
        _GRACE_S = self.grace_s
        _WATCHDOG_CANCEL = threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, _python_handler)
            try:
                self._listener = _Listener()
                _LISTENER_FD = self._listener.wsock.fileno()
            except (OSError, ValueError):  # no socketpair or wakeup fd here: the Python handler acts alone
                self._listener = None
        return self

    def __exit__(self, *exc) -> None:
        global _REQUESTED, _REQUESTED_AT, _WATCHDOG_CANCEL, _LISTENER_FD, _GRACE_S
        if _WATCHDOG_CANCEL is not None:
            _WATCHDOG_CANCEL.set()  # the run ended by itself: no forced exit after this
            _WATCHDOG_CANCEL = None
        for sig, prev in self._previous.items():  # first: no signal reaches our handler or listener after this
            signal.signal(sig, prev)
        self._previous = {}
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        _LISTENER_FD = None
        _REQUESTED = _REQUESTED_AT = None
        _GRACE_S = DEFAULT_GRACE_S

    @property
    def requested(self) -> Optional[str]:
        return _REQUESTED
