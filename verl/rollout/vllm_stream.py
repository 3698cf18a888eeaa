"""Streaming generation on the in-process vLLM engine: the requests of several batches in the engine at
once, each batch handed back as soon as its own requests are done (asynchronous training with
`async_training.streaming`, docs/async.md).

    stream = VLLMStream(engine, weights)               # engine: a VLLMRollout; weights: the run's WeightSync
    ticket = stream.submit(prompts, sampling)          # queued in the engine; returns at once
    batch, stats = stream.collect(ticket, between_steps=hook)  # steps the engine until that batch is done;
                                                       # the other tickets' requests decode in the same steps
    batch = stream.generate(prompts, sampling)         # submit + collect (validation, extra rollouts)
    stream.sync_weights(model)                         # between two steps: requests in flight go on
                                                       # with the new weights (version: weights.synced)

Why: `LLM.generate` returns only when every request it was given is done, so with one batch per call
the engine runs the long tail of each batch nearly empty, and the next batch waits for it. Here the
next batches' requests are already in the engine while the tail of the current one decodes.

Why by hand: vLLM's streaming front end (AsyncLLM) needs an event loop and the engine in a process
of its own, where verl's in-place weight reload cannot reach it. This drives the engine as
`LLM.generate` itself does (`LLMEngine.add_request`, then `step()` until the outputs are final),
with the outputs routed to their batch by request id.

Versions. Each sample's extra["policy_version"] is the engine's weights version when its batch was
submitted (the oldest weights in it) and extra["policy_version_last"] the version when it finished: a
sync that lands while a request runs makes the rest of it come from the newer weights (the KV cache of
its earlier tokens stays as computed), and its engine log-probs are those of the weights that drew
each token, which is what the importance correction needs. The token at which the version changed is
not known: the offline engine does not report a running request's length (the segment mode,
async_training.partial_rollout, records it).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from verl.batch import Batch
from verl.rollout.base import SamplingParams
from verl.roles import RolloutRole


@dataclass
class Ticket:
    """One submitted batch: its requests' outputs fill in by index as they finish."""

    id: int
    prompts: Batch
    sampling: SamplingParams
    version: int  # the engine's weights version at submission
    outputs: list = field(default_factory=list)  # vLLM RequestOutput per request, None until finished
    last_versions: list = field(default_factory=list)  # the engine's version when each request finished
    left: int = 0  # requests not finished yet

    @property
    def done(self) -> bool:
        return self.left == 0


class VLLMStream(RolloutRole):
    def __init__(self, engine, weights=None):
        """weights: the WeightSync whose `synced` is the engine's weights version (the asynchronous producer's);
        None: the stream counts versions itself, from sync_weights(model, version)."""
        self.engine, self.weights = engine, weights
        self._version = 0
        self.tickets: dict[int, Ticket] = {}
        self._ids = itertools.count()
        from vllm.sampling_params import RequestOutputKind

        self._final_only = RequestOutputKind.FINAL_ONLY

    def follow(self, weights) -> None:
        """Read the engine's weights version from `weights` (a WeightSync) from now on."""
        self.weights = weights

    @property
    def version(self) -> int:
        """The weights version the engine holds."""
        if self.weights is not None:
            return self.weights.synced or 0
        return self._version

    @property
    def _core(self):
        return self.engine.llm.llm_engine

    def in_flight(self) -> int:
        """Batches submitted and not collected yet."""
        return len(self.tickets)

    def submit(self, prompts: Batch, sampling: SamplingParams) -> Ticket:
        if self.engine.asleep:
            self.engine.wake_up()
        requests, params = self.engine.build_requests(prompts, sampling)
        ticket = Ticket(next(self._ids), prompts, sampling, self.version, outputs=[None] * len(requests),
                        last_versions=[None] * len(requests), left=len(requests))
        added = []
        try:
            for j, (request, p) in enumerate(zip(requests, params)):
                p.output_kind = self._final_only  # one output per request, when it is done (as LLM.generate)
                added.append(self._core.add_request(f"{ticket.id}:{j}", request, p))
        except BaseException:
            if added:
                self._core.abort_request(added)
            raise
        self.tickets[ticket.id] = ticket
        return ticket

    def _route(self, out) -> None:
        tid, _, j = str(out.request_id).partition(":")
        ticket = self.tickets.get(int(tid)) if tid.isdigit() else None
        if ticket is None or not j.isdigit() or ticket.outputs[int(j)] is not None:
            raise RuntimeError(f"vLLM returned an output for request {out.request_id!r}, which no batch is waiting for")
        ticket.outputs[int(j)] = out
        ticket.last_versions[int(j)] = self.version
        ticket.left -= 1

    def collect(self, ticket: Ticket, between_steps: Optional[Callable[[], None]] = None,
                timeout_s: float = 3600.0) -> tuple[Batch, dict]:
        """Step the engine until `ticket`'s requests are all done (outputs of other tickets are kept
        for them), calling `between_steps()` before every step (the producer syncs weights and submits
        newly allowed batches there). Raises if the engine runs dry first, or after `timeout_s`.
        Returns the batch and where the collect's time went: engine steps, their seconds, the hook's
        seconds between them (weight syncs, submissions) and the requests in the engine summed over the
        steps (all batches: how full the steps were)."""
        if ticket.id not in self.tickets:
            raise RuntimeError(f"batch {ticket.id} was already collected or aborted")
        deadline = time.monotonic() + timeout_s
        call_start = time.perf_counter()
        steps, step_s, hook_s, requests = 0, 0.0, 0.0, 0
        while not ticket.done:
            t0 = time.perf_counter()
            if between_steps is not None:
                between_steps()
            if not self._core.has_unfinished_requests():
                raise RuntimeError(f"the vLLM engine has no request left, but batch {ticket.id} is missing "
                                   f"{ticket.left} results")
            requests += self._core.get_num_unfinished_requests()
            t1 = time.perf_counter()
            for out in self._core.step():
                if out.finished:
                    self._route(out)
            t2 = time.perf_counter()
            steps, step_s, hook_s = steps + 1, step_s + (t2 - t1), hook_s + (t1 - t0)
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {ticket.id} not done after {timeout_s:g} s of streaming generation "
                                   f"({ticket.left} requests left)")
        call_end = time.perf_counter()
        del self.tickets[ticket.id]
        stats = {"steps": steps, "step_s": step_s, "hook_s": hook_s, "requests": requests}
        # marks: the collect's own span is the "engine call" (the submission came earlier, while other
        # batches generated: counting from it would charge their time to verl's side of the call)
        batch = self.engine.rollout_from_outputs(ticket.prompts, ticket.sampling, ticket.outputs,
                                                 (call_start, call_start, call_end))
        per_sample = ticket.sampling.n if len(ticket.outputs) == len(ticket.prompts) else 1  # greedy: n requests
        last = [v for v in ticket.last_versions for _ in range(per_sample)]
        extra = batch.extra or [{} for _ in range(len(batch))]
        return batch.replace(extra=[dict(e, policy_version=ticket.version, policy_version_last=v)
                                    for e, v in zip(extra, last)]), stats

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        return self.collect(self.submit(prompts, sampling))[0]

    def sync_weights(self, model, version: Optional[int] = None) -> dict:
        """The engine's in-place reload, between two steps (requests in flight keep their KV cache and
        go on with the new weights); `version`: the weights version the engine holds afterwards, where the
        stream counts them itself (with a WeightSync, that object records it)."""
        metrics = self.engine.sync_weights(model)
        if version is not None:
            self._version = version
        return metrics

    def abort_all(self) -> None:
        """Drop every batch in flight (the producer stops: their requests are freed in the engine)."""
        ids = [f"{t.id}:{j}" for t in self.tickets.values() for j, out in enumerate(t.outputs) if out is None]
        self.tickets.clear()
        if ids:
            self._core.abort_request(ids)

    # The rest of RolloutRole is the engine's own.
    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def can_sleep(self) -> bool:
        return self.engine.can_sleep()

    def unbacked_bytes(self) -> int:
        return self.engine.unbacked_bytes()

    def metrics(self) -> dict:
        return self.engine.metrics()

    def state_dict(self) -> dict:
        return self.engine.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.engine.load_state_dict(state)
