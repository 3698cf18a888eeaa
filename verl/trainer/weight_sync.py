"""The weights' versions between the trainer's updates and the asynchronous producer's engine: one
object, shared by the source, the streaming driver and segment generation (docs/async.md).

    weights = WeightSync(locked_engine, model, timeout_s=600, device=device, priority="normal")
    with weights.updating(): actor.update(batch)   # trainer: no sync reads the weights meanwhile; +1 version
    weights.publish(step)                          # trainer: the producer may use the weights of `step` updates
    weights.wait_for_turn(i, k, stop)              # producer: until published >= i - k (or the source stops)
    weights.sync_to_newest(wait=True)              # producer: the engine <- the actor's weights, if newer

Versions count updates: `actor` is the number of updates the actor's weights hold, `published` the one
the trainer allows the producer (it publishes when it asks for its next batch, so with k = 0 nothing
generates while the rest of a step runs), `synced` the one the engine holds (None before the first sync).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Optional

from verl.trainer.engine_stream import update_event, wait_for


class WeightSync:
    def __init__(self, engine, model, *, timeout_s: float, device, priority: str, version: int = 0):
        """engine: the rollout engine behind the producer's lock (LockedEngine); model: the actor's module;
        timeout_s: async_training.timeout_s, the longest a sync waits for an update; device, priority: the
        producer's CUDA stream (verl/trainer/engine_stream.py); version: the updates done before (resume)."""
        self.engine, self.model, self.timeout_s = engine, model, timeout_s
        self.device, self.priority = device, priority
        self.actor = self.published = version
        self.synced: Optional[int] = None
        self._updating = threading.Lock()
        self._update_done = None  # CUDA event of the last update's end, where the producer has its own stream
        self._turn = threading.Condition()

    # ------------------------------------------------------------------ trainer side
    @contextlib.contextmanager
    def updating(self):
        """The actor's update: no sync reads its weights meanwhile; afterwards they are one version newer."""
        with self._updating:
            yield
            self._update_done = update_event(self.device, self.priority)
            self.actor += 1

    def publish(self, version: int) -> None:
        with self._turn:
            self.published = version
            self._turn.notify_all()

    def wake_all(self) -> None:
        """Every waiting producer looks at its stop flag again (the source is closing)."""
        with self._turn:
            self._turn.notify_all()

    # ------------------------------------------------------------------ producer side
    def wait_for_turn(self, i: int, k: int, stop: threading.Event) -> bool:
        """Wait until batch i may be generated (published >= i - k: weights at most k updates old);
        False once `stop` is set."""
        with self._turn:
            while self.published < i - k and not stop.is_set():
                self._turn.wait(timeout=1.0)
        return not stop.is_set()

    def sync_to_newest(self, wait: bool = True) -> Optional[int]:
        """Sync the engine to the actor's weights if they are newer than its own; never in the middle of an
        update (`wait`: for it to end, at most timeout_s; else keep the engine's weights). The engine's version."""
        if not (self._updating.acquire(timeout=self.timeout_s) if wait else self._updating.acquire(False)):
            if wait:
                raise TimeoutError(f"the actor's update held its weights for {self.timeout_s:g} s "
                                   "(async_training.timeout_s); the producer could not sync the engine")
            return self.synced
        try:
            version = self.actor  # what the weights are now (an update may have ended meanwhile)
            if self.synced != version:
                wait_for(self._update_done)  # a stream of its own: after the update's last kernels
                self.engine.sync_weights(self.model)
                self.synced = version
        finally:
            self._updating.release()
        return self.synced

    def allows(self, j: int, k: int) -> bool:
        """Whether batch j may start now on the engine's weights (both published and synced >= j - k)."""
        return self.published >= j - k and self.synced is not None and self.synced >= j - k
