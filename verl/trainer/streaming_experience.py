"""Asynchronous experience with streaming generation (`async_training.streaming`, vLLM; docs/async.md).

The producer of AsyncExperience generates one batch per engine call, and an engine call returns
only when its slowest response is done: with long-tail lengths the engine runs that tail nearly
empty while the next batch waits. Here the engine is driven step by step (verl/rollout/vllm_stream.py)
and, between two steps of batch i, the producer

  1. syncs the engine to the actor's newest weights if an update has ended (never during one): the
     requests in flight go on with them;
  2. submits batch j = i + 1, i + 2, ... as soon as the bound allows it: the published version and the
     engine's are both >= j - max_staleness (the same rule as the batch-at-a-time producer).

So up to max_staleness + 1 batches share the engine, and batch i is handed over as soon as its own
requests are done. Prompts are drawn in order and each drawn batch's loader position is kept until it
is trained on (a resume regenerates every batch not yet trained, as without streaming). With
max_staleness 0 nothing is submitted ahead: each batch is one submit and collect on the current weights.

Per sample: extra["policy_version"] (the weights at submission, the oldest in it) and
extra["policy_version_last"] (at its end). Metrics: async/stream_prefetched (1 when the batch was
submitted while an earlier one generated), async/stream_switched_samples (samples that spanned a sync),
async/stream_in_flight (batches still in the engine when this one was handed over).
"""

from __future__ import annotations

import collections
import time

from verl.rollout.vllm_stream import VLLMStream
from verl.trainer.experience_source import AsyncExperience
from verl.trainer.step_seed import step_seed


class _Stopped(Exception):
    """Raised between two engine steps once the source is closed: the producer leaves its batch."""


class StreamingExperience(AsyncExperience):
    def __init__(self, trainer):
        self.stream = VLLMStream(trainer.rollout)
        trainer.rollout = self.stream  # AsyncExperience wraps it in the engine lock
        super().__init__(trainer)
        self.ahead: collections.deque = collections.deque()  # (index, ticket) of the batches submitted ahead
        self.submitted = None  # the ticket of the batch being generated, if it was submitted ahead

    def _producer_generate(self):
        return self._stream_generate

    def _sync_to_newest(self, wait: bool = True) -> int:
        version = super()._sync_to_newest(wait)
        self.stream.version = version
        return version

    # ------------------------------------------------------------------ producer thread
    def _stream_generate(self, stream, prompts, sampling):
        """The producer's engine.generate: the batch's ticket (submitted ahead, or now), collected."""
        ticket = self.submitted
        if ticket is not None and ticket.prompts is prompts:
            self.submitted = None
        else:  # not drawn ahead, or another call (ReMax's greedy baseline)
            ticket = stream.submit(prompts, sampling)
        return stream.collect(ticket, between_steps=self._between_steps, timeout_s=self.timeout_s)

    def _between_steps(self) -> None:
        if self.stop.is_set():
            raise _Stopped
        self._sync_to_newest(wait=False)
        j = self.next_index + 1 + len(self.ahead)
        while self.version >= j - self.k and self.synced >= j - self.k:
            self.ahead.append((j, self.stream.submit(self._draw(), self.t.sampling)))
            j += 1

    def _next_prompts(self, i: int):
        """Batch i's prompts: drawn ahead (and submitted), or drawn now. (prompts, drawn ahead?)"""
        if self.ahead:
            j, self.submitted = self.ahead.popleft()
            assert j == i, (j, i)  # drawn in order, taken in order
            return self.submitted.prompts, True
        return self._draw(), False

    def _produce(self) -> None:
        try:
            self._produce_batches()
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which stops with it
            self._put(exc)
        finally:
            self.stream.abort_all()  # in this thread: the engine is not shared with the closing one

    def _produce_batches(self) -> None:
        t = self.t
        while not self.stop.is_set():
            i = self.next_index
            if not self._wait_for_turn(i):
                return
            # Wait for an update in progress only when the engine's weights are too old for batch i: a batch
            # submitted ahead has its version already, and the engine's requests must keep decoding meanwhile
            # (the hook syncs as soon as the update ends). At k = 0 the update has always ended here.
            too_old = self.synced is None or self.synced < i - self.k
            self._sync_to_newest(wait=not self.ahead and too_old)
            prompts, ahead = self._next_prompts(i)
            step_seed(t.config.seed, i)  # as the synchronous step seeds itself
            started = time.perf_counter()
            batch, metrics = t.generate_experience(prompts)
            metrics["timing_s/async_generate"] = time.perf_counter() - started
            first = [e["policy_version"] for e in batch.extra]
            metrics["async/stream_prefetched"] = float(ahead)
            metrics["async/stream_switched_samples"] = float(
                sum(e["policy_version_last"] != e["policy_version"] for e in batch.extra))
            metrics["async/stream_in_flight"] = float(self.stream.in_flight())
            c = self.stream.last_collect  # the batch's collect: engine steps, their seconds, how full they were
            metrics["async/stream_steps"] = float(c.get("steps", 0))
            metrics["async/stream_step_s"] = float(c.get("step_s", 0.0))
            metrics["async/stream_hook_s"] = float(c.get("hook_s", 0.0))
            metrics["async/stream_requests_mean"] = float(c.get("requests_mean", 0.0))
            self.next_index = i + 1
            self._put((batch, metrics, min(first)))
