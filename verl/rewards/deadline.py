"""A time limit for reward calls: `reward_fn.timeout_s` seconds per call of a component.

    budget = CallBudget(timeout_s=300, label="python (my_rewards.py:score)")
    scores = budget.call(fn, prompts, responses, samples)   # CallTimeout once the budget is spent

Why a thread: a Python function cannot be stopped from outside. A subprocess could be killed,
but it would have to pickle the user's function (closures and lambdas do not pickle) and copy
every batch, for every reward type. Instead the call runs
in a daemon thread and the caller waits for it with a deadline. On timeout the caller goes on
(`on_error` decides: fail raises RewardError, zero scores the batch 0) and the call is
abandoned: it keeps running in the background until it returns or the process exits, and its
result is dropped. A function that must run in the main thread (one that installs signal
handlers, e.g. signal-based timeouts inside a math checker) can opt out with
`reward_fn.timeout_s: 0`: it is then called directly, with no limit.

While waiting, the caller also watches for a stop request (SIGINT/SIGTERM, see
verl/signals.py): a call still running checkpoint.stop_grace_s / 2 after the signal is
abandoned with `Interrupted`, so a hung reward function never holds a stop up.

One budget covers everything a component does for one batch: the batch call and, when that
raised, the per-sample calls that find the failing samples (verl.rewards.manager). The api
type bounds its calls itself, from its per-request timeout (verl.rewards.api.worst_case_s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import threading
import time
from typing import Callable


PYTHON_TIMEOUT_S = 300.0  # default per-call limit of every type but api
API_TIMEOUT_S = 30.0  # default per-request HTTP timeout of the api type
POLL_S = 0.1  # how often a wait looks for a stop request


class CallTimeout(Exception):
    """A reward call did not return within its budget (the call keeps running in the background)."""


def request_timeout_s(cfg: RewardFnConfig) -> float:
    """The api type's per-request HTTP timeout: reward_fn.timeout_s, default API_TIMEOUT_S."""
    return API_TIMEOUT_S if cfg.timeout_s is None else float(cfg.timeout_s)


def call_limit(cfg: RewardFnConfig) -> dict:
    """{"timeout_s": seconds one batch call of the component `cfg` may take (0: no limit here),
    "limit": what that number is, for messages}.

    Every type but api: reward_fn.timeout_s, default PYTHON_TIMEOUT_S. api: none here, because
    the api reward bounds each call itself by its requests' worst case, which depends on the
    batch size (verl.rewards.api.worst_case_s); reward_fn.timeout_s is its per-request timeout."""
    if cfg.type == "api":
        return {"timeout_s": 0.0, "limit": "reward_fn.timeout_s"}
    return {"timeout_s": PYTHON_TIMEOUT_S if cfg.timeout_s is None else float(cfg.timeout_s),
            "limit": "reward_fn.timeout_s"}


class CallBudget:
    """The time left to one component's calls on one batch."""

    def __init__(self, timeout_s: float, label: str, limit: str = "reward_fn.timeout_s"):
        self.timeout_s = float(timeout_s or 0.0)
        self.label = label
        self.limit = limit  # names the limit in messages
        self.deadline = time.monotonic() + self.timeout_s if self.timeout_s > 0 else None

    def call(self, fn: Callable, *args):
        """fn(*args), or CallTimeout when the budget runs out first."""
        from verl.signals import Interrupted, stop_overdue

        where = f"the reward call {self.label}"
        if self.deadline is None:
            return fn(*args)
        if time.monotonic() >= self.deadline:
            raise CallTimeout(self._why())
        box: dict = {}
        done = threading.Event()

        def run():
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                box["error"] = exc
            finally:
                done.set()

        thread = threading.Thread(target=run, name=f"verl-reward {self.label}", daemon=True)
        thread.start()
        while not done.wait(max(0.0, min(POLL_S, self.deadline - time.monotonic()))):
            if stop_overdue():  # a stop is waiting on this call: give it up, the step is abandoned
                raise Interrupted(where)
            if time.monotonic() >= self.deadline:
                raise CallTimeout(self._why())
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _why(self) -> str:
        return (f"did not return within {self.limit}={self.timeout_s:g}s; the call was abandoned and keeps "
                "running in a background thread")
