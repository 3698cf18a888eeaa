"""Real verl's reward functions (`custom_reward_function.path` / `.name`) as batch reward functions.

Real verl (volcengine/verl) calls a user's scorer in one of two forms, and so do we:

* per sample (its `naive` reward manager), by keyword, once per response:
      compute_score(data_source=str, solution_str=str, ground_truth=str, extra_info=dict, **reward_kwargs)
* batched (its `batch` reward manager), by keyword, once per batch:
      compute_score(data_sources=[...], solution_strs=[...], ground_truths=[...], extra_infos=[...], **reward_kwargs)

`solution_str` is the decoded response (special tokens skipped), `ground_truth` the row's
`reward_model.ground_truth`, `extra_info` its `extra_info` dict. A result is a number, or a
dict whose "score" is the reward (its other numeric entries become `reward/<name>/<key>`
metrics: real verl's `reward_extra_info`). Which form a function has is read from its
parameter names (`solution_str` vs `solution_strs`). A signature real verl could not call either is
a TypeError here; verl.rewards.callables turns it into the ConfigError naming the key.
"""

from __future__ import annotations

import inspect
import numbers
from typing import Callable, Optional

from verl.rewards.base import RewardFn, SampleError

PER_SAMPLE = ("data_source", "solution_str", "ground_truth", "extra_info")
BATCHED = ("data_sources", "solution_strs", "ground_truths", "extra_infos")


def score_style(params) -> Optional[str]:
    """'per_sample' / 'batched' for a real-verl compute_score signature, None for anything else."""
    if "solution_str" in params:
        return "per_sample"
    if "solution_strs" in params:
        return "batched"
    return None


def _keywords(fn: Callable, names: tuple, reward_kwargs: dict, where: str) -> tuple[tuple, dict]:
    """The argument names fn takes among `names` (all with **kwargs), and the reward_kwargs it accepts."""
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    taken = tuple(n for n in names if takes_all or n in params)
    unknown = [k for k in reward_kwargs if not takes_all and k not in params]
    if unknown:
        raise TypeError(f"{where}: {', '.join(unknown)} (reward_kwargs) is not a parameter of "
                          f"{getattr(fn, '__name__', 'the function')}{inspect.signature(fn)}")
    required = [n for n, p in params.items() if p.default is p.empty and n not in names and n not in reward_kwargs
                and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    if required:
        raise TypeError(f"{where}: {getattr(fn, '__name__', 'the function')}{inspect.signature(fn)} requires "
                          f"{', '.join(required)}, which real verl does not pass (it passes {', '.join(names)} and "
                          f"the reward_kwargs)")
    return taken, dict(reward_kwargs)


class ScoreDetails:
    """Splits a compute_score result into the reward and its extra metrics (means over the batch)."""

    def __init__(self):
        self.extra: dict[str, list] = {}

    def take(self, result):
        if isinstance(result, dict):
            if "score" not in result:
                return SampleError(f"returned a dict without 'score' (keys: {', '.join(map(str, result))})")
            for k, v in result.items():
                if k != "score" and isinstance(v, numbers.Real) and not isinstance(v, bool):
                    self.extra.setdefault(str(k), []).append(float(v))
            return result["score"]
        return result

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}/{k}": sum(v) / len(v) for k, v in self.extra.items() if v}


def _columns(responses, samples) -> dict[str, list]:
    return {"data_source": [s.get("data_source") for s in samples], "solution_str": list(responses),
            "ground_truth": [s.get("ground_truth") for s in samples],
            "extra_info": [dict(s.get("extra") or {}) for s in samples]}


def per_sample_fn(fn: Callable, where: str, reward_kwargs: Optional[dict] = None) -> RewardFn:
    """Real verl's naive manager: fn called once per sample, by keyword."""
    taken, kwargs = _keywords(fn, PER_SAMPLE, reward_kwargs or {}, where)

    def compute_score_per_sample(prompts, responses, samples):
        cols, details, out = _columns(responses, samples), ScoreDetails(), []
        for i in range(len(responses)):
            try:
                out.append(details.take(fn(**{n: cols[n][i] for n in taken}, **kwargs)))
            except Exception as exc:  # one sample's failure; the manager applies on_error
                out.append(SampleError(f"raised {type(exc).__name__}: {exc}"))
        compute_score_per_sample.extra_metrics = details.metrics
        return out

    compute_score_per_sample.isolate_errors = False  # failures are already per sample
    compute_score_per_sample.__name__ = getattr(fn, "__name__", "compute_score")
    return compute_score_per_sample


def batched_fn(fn: Callable, where: str, reward_kwargs: Optional[dict] = None) -> RewardFn:
    """Real verl's batch manager: fn called once with the batch's lists, by keyword."""
    taken, kwargs = _keywords(fn, BATCHED, reward_kwargs or {}, where)

    def compute_score_batched(prompts, responses, samples):
        cols, details = _columns(responses, samples), ScoreDetails()
        out = fn(**{n: cols[n[:-1]] for n in taken}, **kwargs)  # data_sources <- data_source, ...
        if isinstance(out, (list, tuple)):
            out = [details.take(r) for r in out]
        compute_score_batched.extra_metrics = details.metrics
        return out

    compute_score_batched.__name__ = getattr(fn, "__name__", "compute_score")
    return compute_score_batched
