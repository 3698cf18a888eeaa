"""RewardManager: turn a Batch into one scalar score per sequence, plus metrics.

    manager = build_reward_manager(cfg.reward_fn, max_response_length=cfg.rollout.max_new_tokens)
    scores, metrics = manager.score(batch)     # scores: (B,) float32; metrics: {"reward/<name>": ...}

A `combined` reward is the weighted sum of its components; every other type is a single
component. Each component's function is called once on the whole batch. Its output is
checked: it must have one finite number per sample. A sample whose function raised or
returned NaN/inf/None/a string (or a batch with the wrong number of scores) is an
*error*: with `on_error: fail` it raises `RewardError` naming the function and showing
the sample; with `on_error: zero` it scores 0 and is counted in `reward/errors`. A call that
does not return within its time limit (`reward_fn.timeout_s`, see verl.rewards.deadline) is
an error of every sample of the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import dataclasses
import logging
import math
import numbers
from dataclasses import dataclass
from typing import Any, Optional

import torch

from verl.errors import ConfigError
from verl.rewards.base import RewardError, RewardFn, SampleError, short
from verl.rewards.deadline import CallBudget, CallTimeout, call_limit
from verl.rewards.registry import get_builder

logger = logging.getLogger("verl.rewards")


@dataclass
class Component:
    name: str  # metric label: reward/<name>
    label: str  # names the function in error messages
    weight: float
    fn: RewardFn
    on_error: str  # fail | zero
    timeout_s: float = 0.0  # seconds one batch call may take (verl.rewards.deadline); 0 = no limit
    limit: str = "reward_fn.timeout_s"  # names that limit in messages


def describe(cfg: RewardFnConfig) -> str:
    """How error messages name a reward function, e.g. "python (my_rewards.py:score)"."""
    detail = {"python": cfg.function, "api": cfg.url, "huggingface_rm": cfg.model_name}.get(cfg.type)
    label = cfg.type + (f" ({detail})" if detail else "")
    return f"'{cfg.name}' = {label}" if cfg.name else label


def build_samples(batch, max_response_length: Optional[int] = None) -> tuple[list, list, list]:
    """(prompts, responses, samples) from a Batch; see verl.rewards.base for the sample keys."""
    responses = list(batch.response_text)
    n = len(responses)
    if n == 0 and len(batch) > 0:
        raise ValueError("RewardManager.score: batch.response_text is empty; the rollout must decode responses")
    prompts = list(batch.prompt_text) if batch.prompt_text else [""] * n
    ground_truth = list(batch.ground_truth) if batch.ground_truth else [None] * n
    data_source = list(batch.data_source) if batch.data_source else [None] * n
    extra = list(batch.extra) if batch.extra else [{} for _ in range(n)]
    truncated = [bool(t) for t in batch.truncated] if batch.truncated else [False] * n
    if batch.response_mask is not None:
        lengths = batch.response_mask.sum(-1).long().tolist()
        width = batch.response_mask.shape[1]
    elif batch.responses is not None and batch.attention_mask is not None:
        width = batch.responses.shape[1]
        lengths = batch.attention_mask[:, -width:].sum(-1).long().tolist()
    else:
        width, lengths = 0, [0] * n
    max_len = int(max_response_length) if max_response_length else int(width)
    samples = [
        dict(ground_truth=ground_truth[i], data_source=data_source[i], extra=extra[i] if extra[i] is not None else {},
             response_length=int(lengths[i]), max_response_length=max_len, truncated=truncated[i])
        for i in range(n)
    ]
    return prompts, responses, samples


def _as_float(value: Any) -> tuple[Optional[float], str]:
    """(float, "") for a finite real number, else (None, why not)."""
    if isinstance(value, SampleError):
        return None, value.message
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if hasattr(value, "item") and not isinstance(value, (str, bytes)) and getattr(value, "shape", None) == ():
        value = value.item()  # numpy scalars
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isfinite(f):
            return f, ""
        return None, f"returned {f}"
    return None, f"returned {short(repr(value), 40)} (not a number)"


class RewardManager:
    """Scores batches with the reward function(s) described by a RewardFnConfig."""

    def __init__(self, cfg: RewardFnConfig, max_response_length: Optional[int] = None,
                 functions: Optional[dict[str, RewardFn]] = None):
        self.cfg = cfg
        self.max_response_length = max_response_length
        self.components = self._build_components(cfg, functions or {})

    @staticmethod
    def _build_components(cfg: RewardFnConfig, functions: Optional[dict] = None) -> list[Component]:
        # The section checked itself (verl/config/reward_fn.py): a known type, components for combined.
        if cfg.type == "combined":
            parts = []
            for i, c in enumerate(cfg.components):
                # the parent's weight scales the whole sum; 'zero' on the parent applies to every component
                policy = "zero" if "zero" in (c.on_error, cfg.on_error) else "fail"
                timeout_s = cfg.timeout_s if c.timeout_s is None else c.timeout_s  # a component may set its own
                parts.append((dataclasses.replace(c, on_error=policy, timeout_s=timeout_s), c.weight * cfg.weight,
                              policy))
        else:
            parts = [(cfg, cfg.weight, cfg.on_error)]
        components, seen = [], {}
        for c, weight, policy in parts:
            base = c.name or c.type
            seen[base] = seen.get(base, 0) + 1
            name = base if seen[base] == 1 else f"{base}_{seen[base]}"
            # `functions`: live callables of the Python API (verl.rewards.callables), by component name
            fn = functions[name] if c.type == "python" and name in (functions or {}) else get_builder(c.type)(c)
            components.append(Component(name=name, label=describe(c), weight=float(weight), fn=fn, on_error=policy,
                                        **call_limit(c)))
        return components

    def __call__(self, prompts: list, responses: list, samples: list) -> list[float]:
        """Combined scores as a plain list (the manager is itself a reward function)."""
        total, _, _ = self._score_lists(prompts, responses, samples)
        return total

    def score(self, batch) -> tuple[torch.Tensor, dict[str, float]]:
        """(scores (B,) float32, metrics) for a Batch with prompt_text/response_text filled."""
        scores, _, metrics = self.score_parts(batch)
        return scores, metrics

    def score_parts(self, batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """(scores (B,), parts (B, K): each component's unweighted score, metrics); `weights` (K,)
        combine the parts into the scores. GDPO normalises the parts one by one."""
        prompts, responses, samples = build_samples(batch, self.max_response_length)
        total, metrics, parts = self._score_lists(prompts, responses, samples)
        parts = torch.tensor(parts, dtype=torch.float32).T.reshape(len(total), len(self.components))
        return torch.tensor(total, dtype=torch.float32), parts, metrics

    @property
    def weights(self) -> list[float]:
        return [c.weight for c in self.components]

    def _score_lists(self, prompts, responses, samples) -> tuple[list[float], dict[str, float], list[list[float]]]:
        n = len(responses)
        total = [0.0] * n
        metrics: dict[str, float] = {}
        errored: set[int] = set()
        parts = []  # (K, B)
        for comp in self.components:
            values, bad = run_component(comp, prompts, responses, samples)
            parts.append(values)
            errored |= bad
            for i, v in enumerate(values):
                total[i] += comp.weight * v
            metrics[f"reward/{comp.name}"] = sum(values) / n if n else 0.0
            extra = getattr(comp.fn, "extra_metrics", None)  # a compute_score's dict entries besides "score"
            if extra is not None:
                metrics.update(extra(f"reward/{comp.name}"))
        metrics["reward/errors"] = float(len(errored))
        metrics.update(source_means(total, samples))
        return total, metrics, parts


def source_means(total: list, samples: list) -> dict[str, float]:
    """`reward/<data_source>/mean` of the combined score, for each data source the samples name."""
    by_source: dict[str, list] = {}
    for score, s in zip(total, samples):
        if s.get("data_source"):
            by_source.setdefault(str(s["data_source"]), []).append(score)
    return {f"reward/{src}/mean": sum(v) / len(v) for src, v in by_source.items()}


def run_component(comp: Component, prompts, responses, samples) -> tuple[list[float], set[int]]:
    """Call one reward function on the batch; check and police its output.

    Returns (scores with errors set to 0, indices of errored samples). If the function
    raises on the whole batch and allows it (`fn.isolate_errors`, default True), it is
    called again one sample at a time to find which samples fail.
    """
    n = len(responses)
    if n == 0:
        return [], set()
    budget = CallBudget(comp.timeout_s, comp.label, comp.limit)  # one time limit for all calls below
    try:
        out = budget.call(comp.fn, prompts, responses, samples)
    except (RewardError, ConfigError):  # ConfigError: e.g. a reward model folder that does not load
        raise
    except CallTimeout as exc:  # the whole batch failed; calling again per sample would wait as long again
        out = [SampleError(str(exc))] * n
    except Exception as exc:
        if getattr(comp.fn, "isolate_errors", True) and n > 1:
            out = []
            for i in range(n):
                try:
                    one = budget.call(comp.fn, [prompts[i]], [responses[i]], [samples[i]])
                    out.append(one[0] if _is_sequence(one) and len(one) == 1 else SampleError(
                        f"returned {short(repr(one), 40)} for one sample"))
                except RewardError:
                    raise
                except CallTimeout as exc_i:  # the budget is spent: the samples not yet scored fail with it
                    out += [SampleError(str(exc_i))] * (n - len(out))
                    break
                except Exception as exc_i:
                    out.append(SampleError(f"raised {type(exc_i).__name__}: {exc_i}"))
        else:
            out = [SampleError(f"raised {type(exc).__name__}: {exc}")] * n
    if isinstance(out, torch.Tensor):
        out = out.reshape(-1).tolist() if out.dim() <= 1 else out
    elif hasattr(out, "tolist") and not isinstance(out, (list, tuple)):
        out = out.tolist()  # numpy arrays
    if not _is_sequence(out) or len(out) != n:
        got = f"{len(out)} scores" if _is_sequence(out) else short(repr(out), 40)
        out = [SampleError(f"returned {got} for a batch of {n} samples")] * n

    values, bad, first = [], set(), None
    for i, v in enumerate(out):
        f, why = _as_float(v)
        if f is None:
            bad.add(i)
            first = first if first is not None else (i, why)
            f = 0.0
        values.append(f)
    if bad:
        i, why = first
        message = (f"reward {comp.label} failed on sample {i} of {n} "
                   f"(prompt={short(prompts[i])!r}, response={short(responses[i])!r}): {short(why, 200)}")
        if comp.on_error == "fail":
            raise RewardError(message + " [set on_error: zero to score such samples 0]")
        logger.warning("%d sample(s) scored 0 under on_error=zero; first: %s", len(bad), message)
    return values, bad


def _is_sequence(x) -> bool:
    return isinstance(x, (list, tuple))


def build_reward_manager(cfg: RewardFnConfig, max_response_length: Optional[int] = None,
                         functions: Optional[dict[str, RewardFn]] = None) -> RewardManager:
    """Factory: a RewardManager for `cfg` (pass rollout.max_new_tokens as max_response_length).
    `functions`: {component name: reward function} used for those `python` components instead
    of loading their `function` (the Python API's callables)."""
    return RewardManager(cfg, max_response_length=max_response_length, functions=functions)
