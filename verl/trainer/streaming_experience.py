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

from verl.trainer.async_experience import AsyncExperience, Stopped


class StreamingExperience(AsyncExperience):
    def __init__(self, stage, lock, **args):
        """stage: the RolloutStage over the VLLMStream (verl/rollout/vllm_stream.py; run_engines builds it)."""
        super().__init__(stage, lock, **args)
        self.stream = stage.engine
        self.ahead: collections.deque = collections.deque()  # (index, ticket) of the batches submitted ahead
        self.submitted = None  # the ticket of the batch being generated, if it was submitted ahead

    def _producer_engine(self):
        return self.engine.generating_with(self._stream_generate)

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
            raise Stopped
        self._sync_to_newest(wait=False)
        j = self.next_index + 1 + len(self.ahead)
        while self.version >= j - self.k and self.synced >= j - self.k:
            self.ahead.append((j, self.stream.submit(self._draw(), self.stage.sampling.base)))
            j += 1

    def _prepare(self, i: int):
        """Batch i's prompts: drawn ahead (and submitted), or drawn now; whether they were drawn ahead."""
        # Wait for an update in progress only when the engine's weights are too old for batch i: a batch
        # submitted ahead has its version already, and the engine's requests must keep decoding meanwhile
        # (the hook syncs as soon as the update ends). At k = 0 the update has always ended here.
        too_old = self.synced is None or self.synced < i - self.k
        self._sync_to_newest(wait=not self.ahead and too_old)
        if self.ahead:
            j, self.submitted = self.ahead.popleft()
            assert j == i, (j, i)  # drawn in order, taken in order
            return self.submitted.prompts, True
        return self._draw(), False

    def _finish(self, batch, metrics: dict, ahead: bool) -> int:
        """The stream's metrics; the batch's version: the oldest weights at any of its submissions."""
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
        return min(first)

    def _producer_done(self) -> None:
        self.stream.abort_all()  # in this thread: the engine is not shared with the closing one
