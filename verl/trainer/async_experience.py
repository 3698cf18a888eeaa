"""Asynchronous experience: a producer thread generates batch i as soon as the engine's weights are at
most k = `async_training.max_staleness` updates behind (version >= i - k), while the trainer updates on
batch i - 1 (docs/async.md).

    source = AsyncExperience(stage, lock, model=actor_module, counters=counters, cfg=config.async_training,
                             device=device, tokenizer=tokenizer)
    experience = source.next()     # Experience(batch, metrics, version), from the queue (starts the producer)

Each sample is tagged with the policy version that produced it (extra["policy_version"]); the trainer drops
samples older than the bound (counted) and corrects the rest with the importance weights of
`rollout.tis_cap` / `rollout.is_mode`. With k = 0 the producer waits for each update, so the run is the
synchronous one, bit for bit.

One class for every asynchronous mode: the producer loop (`_produce`) waits for batch i's turn, takes its
prompts from the generation mode (verl/trainer/generation_modes.py: whole batches, segments with
partial_rollout, or a stream of batches with streaming), runs the stage over the engine generating with
that mode, tags the samples and queues the batch. The versions, the update lock and the update events are
one WeightSync (verl/trainer/weight_sync.py) shared with the mode. The producer never reseeds torch's
global generator: each step's sampling carries its draw seed (verl/trainer/step_seed.py).

Checkpoints in asynchronous mode do not hold the queued batches: they save the prompt loader's position
before the first batch not yet trained on, so a resume regenerates those batches (from the same prompts
and per-step seeds).
"""

from __future__ import annotations

import queue
import threading
import time

from verl.trainer.engine_stream import producer_stream
from verl.trainer.experience_source import Experience
from verl.trainer.generation_modes import Segments, Stopped, Stream, WholeBatches
from verl.trainer.locked_engine import LockedEngine
from verl.trainer.weight_sync import WeightSync


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
    def __init__(self, stage, lock, *, model, counters, cfg, device, tokenizer=None):
        """stage: the RolloutStage (over the engine itself, or with streaming the VLLMStream over it); lock: the
        engine's lock, which the trainer's thread takes too (validation: verl/trainer/locked_engine.py);
        model: the actor's module (synced into the engine); counters: the run's RunCounters (the step being
        trained); cfg: the async_training section; device: the trainer's (the producer's CUDA stream);
        tokenizer: for segments. The draws need no seed here: each step's sampling carries its draw_seed."""
        self.stage, self.counters, self.device = stage, counters, device
        self.engine = LockedEngine(stage.engine, lock, cfg.timeout_s)  # the producer's syncs and generations take the lock
        self.prompts = stage.prompts
        self.k, self.timeout_s = cfg.max_staleness, cfg.timeout_s
        self.priority = cfg.engine_priority  # the CUDA stream of the producer's engine work (engine_stream.py)
        self.weights = WeightSync(self.engine, model, timeout_s=cfg.timeout_s, device=device, priority=self.priority,
                                  version=counters.global_step)
        self.stop = threading.Event()
        self.mode = self._mode(cfg, stage.engine, tokenizer)
        self.engine_cuda_stream = None  # the producer's own CUDA stream (engine_priority: high), once it runs
        self.drawn_lock = threading.Lock()  # guards `drawn` (and the loader's position with it)
        self.data = ConsumedData(self)
        self.items: queue.Queue = queue.Queue(maxsize=self.k + 1)
        self.thread = None
        self.drawn = []  # loader states before each batch drawn and not yet trained on, oldest first
        self.dropped = 0

    def _mode(self, cfg, engine, tokenizer):
        """The generation mode of async_training (verl/trainer/generation_modes.py)."""
        if cfg.streaming:
            engine.follow(self.weights)  # the stream tags its submissions with the version the WeightSync records
            return Stream(engine, self.weights, self._draw, self.k, self.stop, self.timeout_s,
                          self.stage.sampling.base)
        if cfg.partial_rollout and self.k > 0:  # at k = 0 no update lands during a generation
            return Segments(engine, self.weights, self._draw, cfg.segment_tokens, tokenizer)
        return WholeBatches(engine, self.weights, self._draw)

    # ------------------------------------------------------------------ producer
    def _start(self) -> None:
        self.weights.actor = self.counters.global_step
        self.next_index = self.counters.global_step
        self.producer = self.stage.with_engine(self.engine.generating_with(self.mode))
        self.thread = threading.Thread(target=self._producer_main, name="verl-async-rollout", daemon=True)
        self.thread.start()

    def _producer_main(self) -> None:
        """The producer thread: `_produce` on the CUDA stream its engine work runs on."""
        with producer_stream(self.device, self.priority) as stream:
            self.engine_cuda_stream = stream  # None: the stream the engine picks (normal priority)
            self._produce()

    def _draw(self):
        """The next batch's prompts, its loader position kept until it is trained on."""
        with self.drawn_lock:
            self.drawn.append(self.prompts.state_dict())
            return self.prompts.next_batch()

    def _produce(self) -> None:
        """Wait for batch i's turn, take its prompts (the mode syncs the engine as it needs), run the stage
        (the step's sampling carries its draw seed: no global reseeding on this thread), tag it, queue it."""
        try:
            while not self.stop.is_set():
                i = self.next_index
                if not self.weights.wait_for_turn(i, self.k, self.stop):
                    return
                prompts = self.mode.prompts_for(i)
                prepared = self.weights.synced
                started = time.perf_counter()
                batch, metrics = self.producer.run(prompts, i)
                metrics["timing_s/async_generate"] = time.perf_counter() - started
                for e in batch.extra:  # the oldest weights in the sample (partial: its first tokens)
                    e.setdefault("policy_version", prepared)
                version = min(e["policy_version"] for e in batch.extra)
                self.next_index = i + 1
                self._put(Experience(batch, metrics, version))
        except Stopped:
            pass  # closed between two engine steps: the batch is left
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which stops with it
            self._put(exc)
        finally:
            self.mode.close()

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
        self.weights.publish(step)
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

    def updating(self):
        return self.weights.updating()

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
        self.weights.wake_all()
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
