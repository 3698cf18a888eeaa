"""The rollout engine behind one lock, in asynchronous training: the producer's generation and weight
syncs and the trainer's validation never run on the engine at the same time.

    lock = threading.RLock()
    engine = LockedEngine(raw_engine, lock)              # what the trainer's thread calls
    producer = engine.generating_with(in_segments)        # the producer's: its generate is in_segments(raw, prompts, sampling)

The lock is reentrant: a producer's generation syncs the engine between its segments or steps
(`sync_weights` under the lock it already holds).
"""

from __future__ import annotations


class LockedEngine:
    def __init__(self, engine, lock, generate=None):
        """generate: fn(engine, prompts, sampling), the generation this view runs under the lock (None:
        engine.generate)."""
        self._engine, self.lock, self._generate = engine, lock, generate

    def generating_with(self, generate) -> "LockedEngine":
        """The same engine and lock, generating with `generate(engine, prompts, sampling)`."""
        return LockedEngine(self._engine, self.lock, generate)

    def generate(self, prompts, sampling):
        with self.lock:
            if self._generate is not None:
                return self._generate(self._engine, prompts, sampling)
            return self._engine.generate(prompts, sampling)

    def sync_weights(self, model):
        with self.lock:
            return self._engine.sync_weights(model)

    def __getattr__(self, name):  # metrics(), sleep(), tokenizer, ...: the engine's own
        return getattr(self._engine, name)
