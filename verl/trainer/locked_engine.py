"""The rollout engine behind one lock, in asynchronous training: the producer's generation and weight
syncs and the trainer's validation never run on the engine at the same time.

    lock = threading.RLock()
    engine = LockedEngine(raw_engine, lock, timeout_s)    # what the trainer's thread calls
    producer = engine.generating_with(mode)               # the producer's: mode.generate(prompts, sampling) under
                                                          # the lock; its stats come back in metrics()

The lock is reentrant: a producer's generation syncs the engine between its segments or steps
(`sync_weights` under the lock it already holds). A caller waits for it at most `timeout_s`
(async_training.timeout_s, the longest the trainer waits for a batch), then raises TimeoutError.
"""

from __future__ import annotations

import contextlib

from verl.roles import RolloutRole
from verl.trainer.generation_modes import sum_stats


class LockedEngine(RolloutRole):
    """RolloutRole over another: generation and syncs under the lock, the rest the engine's own."""

    def __init__(self, engine, lock, timeout_s: float, mode=None):
        """mode: a generation mode (verl/trainer/generation_modes.py) whose generate(prompts, sampling) ->
        (batch, stats) this view runs under the lock (None: engine.generate)."""
        self._engine, self.lock, self.timeout_s, self._mode = engine, lock, timeout_s, mode
        self._stats: dict = {}  # the mode's stats of the calls since the last metrics()

    def generating_with(self, mode) -> "LockedEngine":
        """The same engine and lock, generating with `mode`."""
        return LockedEngine(self._engine, self.lock, self.timeout_s, mode)

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
            if self._mode is None:
                return self._engine.generate(prompts, sampling)
            batch, stats = self._mode.generate(prompts, sampling)
            sum_stats(self._stats, stats)
            return batch

    def sync_weights(self, model):
        with self._held():
            return self._engine.sync_weights(model)

    @property
    def engine(self):
        """The engine behind the lock (benchmarks and tests inspect it; the run goes through this view)."""
        return self._engine

    def sleep(self) -> None:
        self._engine.sleep()

    def wake_up(self) -> None:
        self._engine.wake_up()

    def can_sleep(self) -> bool:
        return self._engine.can_sleep()

    def unbacked_bytes(self) -> int:
        return self._engine.unbacked_bytes()

    def metrics(self) -> dict:
        """The engine's metrics of the last generation and, with a mode, the mode's of the calls since the
        last metrics() (one batch's: RolloutStage asks once per batch)."""
        metrics = self._engine.metrics()
        if self._mode is not None:
            metrics.update(self._mode.metrics(self._stats))
            self._stats = {}
        return metrics

    def state_dict(self) -> dict:
        return self._engine.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._engine.load_state_dict(state)
