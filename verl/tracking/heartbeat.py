"""A line every few seconds while long silent work runs (validation on a CPU can take minutes before the first
step line): what is being done, how far it got, for how long.

    with Heartbeat(say, lambda: f"{done}/{total} prompts", "validating", every_s=10):
        ...                                        # say("validating: 16/52 prompts, 20 s") every 10 s

The line comes from a daemon thread; `progress()` is read there, so it must only read plain values.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class Heartbeat:
    def __init__(self, say: Callable[[str], None], progress: Callable[[], str], what: str, every_s: float = 10.0):
        self.say, self.progress, self.what, self.every_s = say, progress, what, every_s
        self._done = threading.Event()
        self._thread = None
        self._start = 0.0

    def __enter__(self) -> "Heartbeat":
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.what}", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._done.wait(self.every_s):
            self.say(f"{self.what}: {self.progress()}, {time.monotonic() - self._start:.0f} s")

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)  # a say() in progress ends quickly; never wait longer
