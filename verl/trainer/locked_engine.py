"""The rollout engine behind one lock, in asynchronous training: the producer's generation and weight
syncs and the trainer's validation never run on the engine at the same time.

    lock = threading.RLock()
    engine = LockedEngine(raw_engine, lock, timeout_s)    # what the trainer's thread calls
    producer = engine.generating_with(in_segments)        # the producer's: its generate is in_segments(raw, prompts, sampling)

The lock is reentrant: a producer's generation syncs the engine between its segments or steps
(`sync_weights` under the lock it already holds). A caller waits for it at most `timeout_s`
(async_training.timeout_s, the longest the trainer waits for a batch), then raises TimeoutError.
"""

from __future__ import annotations

import contextlib


class LockedEngine:
    def __init__(self, engine, lock, timeout_s: float, generate=None):
        """generate: fn(engine, prompts, sampling), the generation this view runs under the lock (None:
        engine.generate)."""
        self._engine, self.lock, self.timeout_s, self._generate = engine, lock, timeout_s, generate

    def generating_with(self, generate) -> "LockedEngine":
        """The same engine and lock, generating with `generate(engine, prompts, sampling)`."""
        return LockedEngine(self._engine, self.lock, self.timeout_s, generate)

    @contextlib.contextmanager
    def _held(self):
        if not self.lock.acquire(timeout=self.timeout_s):
            raise TimeoutError(f"the rollout engine stayed busy for {self.timeout_s:g} s (async_training.timeout_s)")
        try:
            yield
        finally:
            self.lock.release()

    def generate(self, prompts, sampling):
        with self._held():
            if self._generate is not None:
                return self._generate(self._engine, prompts, sampling)
            return self._engine.generate(prompts, sampling)

    def sync_weights(self, model):
        with self._held():
            return self._engine.sync_weights(model)

    def __getattr__(self, name):  # metrics(), sleep(), tokenizer, ...: the engine's own
        return getattr(self._engine, name)
