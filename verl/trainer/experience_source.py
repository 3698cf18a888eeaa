"""Where a step's experience comes from: generated now (synchronous), or by a producer thread that
runs ahead of the update by at most `async_training.max_staleness` policy versions (docs/async.md).

    source = build_experience_source(trainer)
    batch = source.next_batch()          # 1-2. a scored batch
    with source.updating(): ...          # 6. the actor update (the producer never syncs mid-update)
    source.after_update()                # 7. the new weights reach the engine: now, or before its next batch

Synchronous: generate with the last update's weights, put the engine to sleep for the update,
sync after it (the hybrid engine). Asynchronous: batch i is generated as soon as the engine's
weights are at most k updates behind (version >= i - k); each sample is tagged with the policy
version that produced it (extra["policy_version"]); the trainer drops samples older than the bound
(counted) and corrects the rest with the importance weights of `rollout.tis_cap` / `rollout.is_mode`.
With k = 0 the producer waits for each update, so the run is the synchronous one, bit for bit.

Checkpoints in asynchronous mode do not hold the queued batches: they save the prompt loader's
position before the first batch not yet trained on, so a resume regenerates those batches (from
the same prompts and per-step seeds).

With `async_training.streaming` (vLLM) the producer drives the engine step by step and keeps the next
batches' requests in it while the current one's tail decodes: verl/trainer/streaming_experience.py.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time

from verl.batch import Batch
from verl.rollout.partial import generate_in_segments
from verl.trainer.engine_stream import producer_stream, update_event, wait_for
from verl.trainer.sleep_policy import SleepPolicy, engine_can_sleep
from verl.trainer.step_seed import step_seed


class SyncExperience:
    def __init__(self, trainer):
        self.t = trainer
        self.data = trainer.train_data  # what a checkpoint saves of the prompt stream
        cfg = trainer.config
        workers = [w for w in (trainer.actor, trainer.reference, trainer.critic) if w is not None]
        micro = getattr(trainer.actor, "micro", None)
        self.sleep = SleepPolicy(cfg.rollout.sleep_when, workers, cfg.training.mini_batch_size,
                                 packed=bool(micro is not None and micro.packed),
                                 can_sleep=engine_can_sleep(trainer.rollout))

    def next_batch(self) -> Batch:
        t = self.t
        batch, t._parts["rollout"] = t.generate_experience(t.train_data.next_batch())
        if self.sleep.wanted(batch):
            t.rollout.sleep()  # hybrid engine: generation memory is freed while the models train
        return batch

    def updating(self):
        return contextlib.nullcontext()

    def after_update(self) -> None:
        self.t.sync_weights()  # the timed stage update_weights

    def close(self) -> None:
        pass


class _LockedEngine:
    """The rollout engine with one lock around its calls: the producer's generation and weight sync,
    and the trainer's validation, never run on it at the same time."""

    def __init__(self, engine, lock):
        self._engine, self._lock = engine, lock
        self.segmented = None  # (thread, fn(engine, prompts, sampling)): that thread's generations in segments

    def generate(self, prompts, sampling):
        with self._lock:
            if self.segmented is not None and threading.current_thread() is self.segmented[0]:
                return self.segmented[1](self._engine, prompts, sampling)
            return self._engine.generate(prompts, sampling)

    def sync_weights(self, model):
        with self._lock:
            return self._engine.sync_weights(model)

    def __getattr__(self, name):
        return getattr(self._engine, name)


class _ConsumedData:
    """The prompt loader as a checkpoint sees it in asynchronous mode: its position before the first
    batch the trainer has not consumed (the producer has drawn further)."""

    def __init__(self, source: "AsyncExperience"):
        self.source = source

    def state_dict(self) -> dict:
        return self.source.resume_data_state()

    def load_state_dict(self, state: dict) -> None:
        self.source.t.train_data.load_state_dict(state)


class AsyncExperience:
    def __init__(self, trainer):
        self.t = trainer
        cfg = trainer.config.async_training
        self.k, self.timeout_s = cfg.max_staleness, cfg.timeout_s
        self.priority = cfg.engine_priority  # the CUDA stream of the producer's engine work (engine_stream.py)
        self.update_done = None  # CUDA event of the last update's end, where the producer has a stream of its own
        self.engine_cuda_stream = None  # the producer's own CUDA stream (engine_priority: high), once it runs
        self.engine = _LockedEngine(trainer.rollout, threading.RLock())
        self.lock = threading.Lock()  # guards `drawn` (and the loader's position with it)
        trainer.rollout = self.engine  # validation goes through the lock too
        self.data = _ConsumedData(self)
        self.version = 0  # updates whose weights the producer may use (published by next_batch)
        self.cond = threading.Condition()
        self.updating_lock = threading.Lock()
        self.weights_version = 0  # updates the actor's weights hold (counted under updating_lock)
        self.items: queue.Queue = queue.Queue(maxsize=self.k + 1)
        self.thread = None
        self.stop = threading.Event()
        self.drawn = []  # loader states before each batch drawn and not yet trained on, oldest first
        self.dropped = 0
        self.synced = None  # the weights version the engine holds
        # Partial rollouts (verl/rollout/partial.py): at k = 0 no update lands during a generation
        self.partial = cfg.partial_rollout and self.k > 0
        self.segment_tokens = cfg.segment_tokens
        self.partial_stats: dict = {}

    # ------------------------------------------------------------------ producer
    def _start(self) -> None:
        self.weights_version = self.t.global_step
        self.next_index = self.t.global_step
        self.thread = threading.Thread(target=self._producer_main, name="verl-async-rollout", daemon=True)
        generate = self._producer_generate()
        if generate is not None:  # set before the thread starts: its first generation goes through it
            self.engine.segmented = (self.thread, generate)
        self.thread.start()

    def _producer_main(self) -> None:
        """The producer thread: `_produce` on the CUDA stream its engine work runs on."""
        with producer_stream(self.t.device, self.priority) as stream:
            self.engine_cuda_stream = stream  # None: the stream the engine picks (normal priority)
            self._produce()

    def _producer_generate(self):
        """The producer thread's own engine.generate(engine, prompts, sampling), or None for the plain one."""
        return self._generate_in_segments if self.partial else None

    def _sync_to_newest(self, wait: bool = True) -> int:
        """Sync the engine to the actor's weights if they are newer than its own; never in the middle
        of an update (`wait`: for it to end; else keep the engine's weights). The engine's version."""
        if not self.updating_lock.acquire(blocking=wait):
            return self.synced
        try:
            version = self.weights_version  # what the weights are now (an update may have ended meanwhile)
            if self.synced != version:
                wait_for(self.update_done)  # a stream of its own: after the update's last kernels
                self.engine.sync_weights(self.t.actor.model)
                self.synced = version
        finally:
            self.updating_lock.release()
        return self.synced

    def _generate_in_segments(self, engine, prompts, sampling):
        batch, stats = generate_in_segments(engine, prompts, sampling, self.segment_tokens,
                                            lambda: self._sync_to_newest(wait=False), self.t.tokenizer)
        for name, value in stats.items():  # summed over the batch's generations (DAPO may take several)
            self.partial_stats[name] = self.partial_stats.get(name, 0) + value
        return batch

    def _wait_for_turn(self, i: int) -> bool:
        """Wait until batch i may be generated (the published version >= i - k: weights at most k
        updates old); False once the source is closed."""
        with self.cond:
            while self.version < i - self.k and not self.stop.is_set():
                self.cond.wait(timeout=1.0)
        return not self.stop.is_set()

    def _draw(self):
        """The next batch's prompts, its loader position kept until it is trained on."""
        with self.lock:
            self.drawn.append(self.t.train_data.state_dict())
            return self.t.train_data.next_batch()

    def _produce(self) -> None:
        t = self.t
        try:
            while not self.stop.is_set():
                i = self.next_index
                if not self._wait_for_turn(i):
                    return
                version = self._sync_to_newest()
                prompts = self._draw()
                step_seed(t.config.seed, i)  # as the synchronous step seeds itself
                started = time.perf_counter()
                self.partial_stats = {}
                batch, metrics = t.generate_experience(prompts)
                metrics["timing_s/async_generate"] = time.perf_counter() - started
                if self.partial:
                    stats = self.partial_stats
                    metrics["async/partial_segments"] = float(stats.get("segments", 0))
                    metrics["async/partial_switched_samples"] = float(stats.get("switched", 0))
                    for name in ("rollout/engine_call_s", "rollout/around_engine_s"):  # all segments, not the last
                        if name in stats:
                            metrics[name] = stats[name]
                for e in batch.extra:
                    e["policy_version"] = version  # the oldest weights in the sample (partial: its first tokens)
                self.next_index = i + 1
                self._put((batch, metrics, version))
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which stops with it
            self._put(exc)

    def _put(self, item) -> None:
        """Queue `item`, waiting while the queue is full, until the source is closed (never forever)."""
        while not self.stop.is_set():
            try:
                self.items.put(item, timeout=1.0)
                return
            except queue.Full:
                continue

    # ------------------------------------------------------------------ trainer side
    def next_batch(self) -> Batch:
        if self.thread is None:
            self._start()
        # The weights of every update so far are the actor's now: the producer may use them. Published
        # here, when the trainer asks for its next batch (not right after the update), so that with k = 0
        # nothing generates while the rest of a step (logging, validation, checkpoints) runs.
        with self.cond:
            self.version = self.t.global_step
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
                raise RuntimeError(f"the asynchronous rollout failed: {type(item).__name__}: {item}") from item
            batch, metrics, version = item
            staleness = self.t.global_step - version
            if staleness > self.k:  # cannot happen while the producer waits; counted if it does
                self.dropped += len(batch)
                with self.lock:
                    self.drawn.pop(0)
                continue
            metrics.update({"async/staleness_mean": float(staleness), "async/staleness_max": float(staleness),
                            "async/dropped_samples": float(self.dropped),
                            "timing_s/async_wait": time.perf_counter() - waited})
            self.t._parts["rollout"] = metrics
            return batch

    @contextlib.contextmanager
    def updating(self):
        with self.updating_lock:
            yield
            self.update_done = update_event(self.t.device, self.priority)
            self.weights_version += 1

    def after_update(self) -> None:
        with self.lock:
            self.drawn.pop(0)  # that batch is trained on: a resume no longer redoes it

    def resume_data_state(self) -> dict:
        """The loader position a resume starts from: before the oldest batch drawn but not yet trained."""
        with self.lock:
            return self.drawn[0] if self.drawn else self.t.train_data.state_dict()

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


def build_experience_source(trainer):
    a = trainer.config.async_training
    if not a.enable:
        return SyncExperience(trainer)
    if a.streaming:
        from verl.trainer.streaming_experience import StreamingExperience  # it subclasses AsyncExperience

        return StreamingExperience(trainer)
    return AsyncExperience(trainer)
