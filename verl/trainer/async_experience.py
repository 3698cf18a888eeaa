"""Asynchronous experience: a producer thread generates batch i as soon as the engine's weights are at
most k = `async_training.max_staleness` updates behind (version >= i - k), while the trainer updates on
batch i - 1 (docs/async.md).

    source = AsyncExperience(stage, lock, model=actor_module, counters=counters, cfg=config.async_training,
                             device=device, seed=config.seed)
    experience = source.next()     # Experience(batch, metrics, version), from the queue (starts the producer)

Each sample is tagged with the policy version that produced it (extra["policy_version"]); the trainer drops
samples older than the bound (counted) and corrects the rest with the importance weights of
`rollout.tis_cap` / `rollout.is_mode`. With k = 0 the producer waits for each update, so the run is the
synchronous one, bit for bit.

The producer loop (`_produce`) is the one of every asynchronous source: wait for batch i's turn, prepare
it (sync the engine, draw its prompts), seed step i, run the stage, finish it (tags, metrics), queue it.
Partial rollouts (partial_experience.py) and streaming (streaming_experience.py) change how a batch is
prepared, generated and finished, not the loop.

Checkpoints in asynchronous mode do not hold the queued batches: they save the prompt loader's position
before the first batch not yet trained on, so a resume regenerates those batches (from the same prompts
and per-step seeds).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time

from verl.trainer.engine_stream import producer_stream, update_event, wait_for
from verl.trainer.experience_source import Experience
from verl.trainer.locked_engine import LockedEngine
from verl.trainer.step_seed import step_seed


class Stopped(Exception):
    """Raised inside a generation once the source is closed: the producer leaves its batch."""


class ConsumedData:
    """The prompt loader as a checkpoint sees it in asynchronous mode: its position before the first
    batch the trainer has not consumed (the producer has drawn further)."""

    def __init__(self, source: "AsyncExperience"):
        self.source = source

    def state_dict(self) -> dict:
        return self.source.resume_data_state()

    def load_state_dict(self, state: dict) -> None:
        self.source.prompts.load_state_dict(state)


class AsyncExperience:
    def __init__(self, stage, lock, *, model, counters, cfg, device, seed: int):
        """stage: the RolloutStage (over the engine itself); lock: the engine's lock, which the trainer's
        thread takes too (validation: verl/trainer/locked_engine.py); model: the actor's module (synced
        into the engine); counters: the run's RunCounters (the step being trained); cfg: the async_training
        section; device: the trainer's (the producer's CUDA stream); seed: the run's (step_seed)."""
        self.stage, self.model, self.counters, self.device, self.seed = stage, model, counters, device, seed
        self.engine = LockedEngine(stage.engine, lock, cfg.timeout_s)  # the producer's syncs and generations take the lock
        self.prompts = stage.prompts
        self.k, self.timeout_s = cfg.max_staleness, cfg.timeout_s
        self.priority = cfg.engine_priority  # the CUDA stream of the producer's engine work (engine_stream.py)
        self.update_done = None  # CUDA event of the last update's end, where the producer has a stream of its own
        self.engine_cuda_stream = None  # the producer's own CUDA stream (engine_priority: high), once it runs
        self.drawn_lock = threading.Lock()  # guards `drawn` (and the loader's position with it)
        self.data = ConsumedData(self)
        self.version = 0  # updates whose weights the producer may use (published by next)
        self.cond = threading.Condition()
        self.updating_lock = threading.Lock()
        self.weights_version = 0  # updates the actor's weights hold (counted under updating_lock)
        self.items: queue.Queue = queue.Queue(maxsize=self.k + 1)
        self.thread = None
        self.producer = None  # the stage the producer runs (over its own view of the engine)
        self.stop = threading.Event()
        self.drawn = []  # loader states before each batch drawn and not yet trained on, oldest first
        self.dropped = 0
        self.synced = None  # the weights version the engine holds

    # ------------------------------------------------------------------ producer
    def _start(self) -> None:
        self.weights_version = self.counters.global_step
        self.next_index = self.counters.global_step
        self.producer = self.stage.with_engine(self._producer_engine())
        self.thread = threading.Thread(target=self._producer_main, name="verl-async-rollout", daemon=True)
        self.thread.start()

    def _producer_engine(self):
        """The engine the producer's stage generates with: the engine under the lock (partial rollouts and
        streaming generate their own way under it: LockedEngine.generating_with)."""
        return self.engine

    def _producer_main(self) -> None:
        """The producer thread: `_produce` on the CUDA stream its engine work runs on."""
        with producer_stream(self.device, self.priority) as stream:
            self.engine_cuda_stream = stream  # None: the stream the engine picks (normal priority)
            self._produce()

    def _sync_to_newest(self, wait: bool = True) -> int:
        """Sync the engine to the actor's weights if they are newer than its own; never in the middle
        of an update (`wait`: for it to end, at most async_training.timeout_s; else keep the engine's
        weights). The engine's version."""
        if not (self.updating_lock.acquire(timeout=self.timeout_s) if wait else self.updating_lock.acquire(False)):
            if wait:
                raise TimeoutError(f"the actor's update held its weights for {self.timeout_s:g} s "
                                   "(async_training.timeout_s); the producer could not sync the engine")
            return self.synced
        try:
            version = self.weights_version  # what the weights are now (an update may have ended meanwhile)
            if self.synced != version:
                wait_for(self.update_done)  # a stream of its own: after the update's last kernels
                self.engine.sync_weights(self.model)
                self.synced = version
        finally:
            self.updating_lock.release()
        return self.synced

    def _wait_for_turn(self, i: int) -> bool:
        """Wait until batch i may be generated (the published version >= i - k: weights at most k
        updates old); False once the source is closed."""
        with self.cond:
            while self.version < i - self.k and not self.stop.is_set():
                self.cond.wait(timeout=1.0)
        return not self.stop.is_set()

    def _draw(self):
        """The next batch's prompts, its loader position kept until it is trained on."""
        with self.drawn_lock:
            self.drawn.append(self.prompts.state_dict())
            return self.prompts.next_batch()

    def _prepare(self, i: int):
        """Before batch i: (its prompts, what `_finish` needs). Here: the engine synced to the newest
        weights (waiting for an update in progress), the prompts drawn; the version they are generated with."""
        version = self._sync_to_newest()
        return self._draw(), version

    def _finish(self, batch, metrics: dict, version) -> int:
        """After batch i's generation: its tags and metrics; the version it counts as (the oldest weights
        in it)."""
        for e in batch.extra:
            e["policy_version"] = version  # the oldest weights in the sample (partial: its first tokens)
        return version

    def _producer_done(self) -> None:
        """The producer leaves (on its own thread): nothing to release here."""

    def _produce(self) -> None:
        try:
            while not self.stop.is_set():
                i = self.next_index
                if not self._wait_for_turn(i):
                    return
                prompts, context = self._prepare(i)
                step_seed(self.seed, i)  # as the synchronous step seeds itself
                started = time.perf_counter()
                batch, metrics = self.producer.run(prompts, i)
                metrics["timing_s/async_generate"] = time.perf_counter() - started
                version = self._finish(batch, metrics, context)
                self.next_index = i + 1
                self._put(Experience(batch, metrics, version))
        except Stopped:
            pass  # closed between two engine steps: the batch is left
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which stops with it
            self._put(exc)
        finally:
            self._producer_done()

    def _put(self, item) -> None:
        """Queue `item`, waiting while the queue is full, until the source is closed (never forever)."""
        while not self.stop.is_set():
            try:
                self.items.put(item, timeout=1.0)
                return
            except queue.Full:
                continue

    # ------------------------------------------------------------------ trainer side
    def next(self) -> Experience:
        if self.thread is None:
            self._start()
        step = self.counters.global_step
        # The weights of every update so far are the actor's now: the producer may use them. Published
        # here, when the trainer asks for its next batch (not right after the update), so that with k = 0
        # nothing generates while the rest of a step (logging, validation, checkpoints) runs.
        with self.cond:
            self.version = step
            self.cond.notify_all()
        deadline = time.monotonic() + self.timeout_s
        waited = time.perf_counter()
        while True:
            try:
                item = self.items.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                alive = self.thread.is_alive()
                raise RuntimeError(f"the asynchronous rollout produced no batch in {self.timeout_s:g} s "
                                   f"(async_training.timeout_s); its thread is {'alive' if alive else 'dead'}") from None
            if isinstance(item, BaseException):
                if _is_input_error(item):  # a reward, data or config error: the same line and exit 2 as in sync
                    raise item
                raise RuntimeError(f"the asynchronous rollout failed: {type(item).__name__}: {item}") from item
            staleness = step - item.version
            if staleness > self.k:  # cannot happen while the producer waits; counted if it does
                self.dropped += len(item.batch)
                with self.drawn_lock:
                    self.drawn.pop(0)
                continue
            item.metrics.update({"async/staleness_mean": float(staleness), "async/staleness_max": float(staleness),
                                 "async/dropped_samples": float(self.dropped),
                                 "timing_s/async_wait": time.perf_counter() - waited})
            return item

    @contextlib.contextmanager
    def updating(self):
        with self.updating_lock:
            yield
            self.update_done = update_event(self.device, self.priority)
            self.weights_version += 1

    def after_update(self) -> dict:
        """The batch is trained on: a resume no longer redoes it. The weights reach the engine before the
        producer's next batch (no sync metrics here)."""
        with self.drawn_lock:
            self.drawn.pop(0)
        return {}

    def resume_data_state(self) -> dict:
        """The loader position a resume starts from: before the oldest batch drawn but not yet trained."""
        with self.drawn_lock:
            return self.drawn[0] if self.drawn else self.prompts.state_dict()

    def close(self) -> None:
        self.stop.set()
        with self.cond:
            self.cond.notify_all()
        while True:  # unblock a producer waiting to put
            try:
                self.items.get_nowait()
            except queue.Empty:
                break
        if self.thread is not None:
            self.thread.join(timeout=self.timeout_s)


def _is_input_error(exc: BaseException) -> bool:
    """Errors of the user's input (a reward that raises or hangs, a bad data row, a config value) that
    the producer thread met: re-raised as they are, so the CLI reports them as the synchronous loop does."""
    from verl.data.sources import DataError
    from verl.errors import ConfigError
    from verl.rewards.base import RewardError

    return isinstance(exc, (ConfigError, DataError, RewardError))
