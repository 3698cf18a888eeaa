"""Graceful stop on SIGINT/SIGTERM: finish the current step, save the full state, exit 0.

    with GracefulStop() as stop:        # `verl train` wraps the run in this
        trainer.train()                 # RunHooks checks `stop_requested()` after each step

The first signal only sets a flag (the step in progress completes, so the saved state is
consistent); RunHooks then saves a full checkpoint and raises `StopTraining`, which the
CLI turns into a message naming the checkpoint and exit code 0. A second signal exits at
once (code 130): whatever save was in progress is abandoned, and because checkpoints are
written atomically the previous one stays intact.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Optional

_REQUESTED: Optional[str] = None  # name of the first signal received, while a GracefulStop is active
_ACTIVE = 0


class StopTraining(Exception):
    """Raised between steps after a stop was requested and the state was saved."""


def stop_requested() -> Optional[str]:
    """The signal name ('SIGINT', 'SIGTERM') if a graceful stop was requested, else None."""
    return _REQUESTED


def request_stop(name: str = "request") -> None:
    """Ask the running trainer to stop after the current step (what the signal handler does)."""
    global _REQUESTED
    _REQUESTED = name


def _handler(signum, frame) -> None:
    global _REQUESTED
    name = signal.Signals(signum).name
    if _REQUESTED is not None:
        sys.stderr.write(f"\n{name} again: exiting now (the last completed checkpoint is intact)\n")
        sys.stderr.flush()
        os._exit(130)
    _REQUESTED = name
    sys.stderr.write(f"\n{name} received: finishing the current step, then saving the full state "
                     "(press Ctrl-C again to exit at once)\n")
    sys.stderr.flush()


class GracefulStop:
    """Installs the handlers for SIGINT and SIGTERM (main thread only) and restores the
    previous ones on exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self._previous = {}

    def __enter__(self) -> "GracefulStop":
        global _REQUESTED, _ACTIVE
        _REQUESTED = None
        _ACTIVE += 1
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, _handler)
        return self

    def __exit__(self, *exc) -> None:
        global _REQUESTED, _ACTIVE
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous = {}
        _ACTIVE -= 1
        _REQUESTED = None

    @property
    def requested(self) -> Optional[str]:
        return _REQUESTED
