"""Python callables as reward functions: the Python API's `reward_funcs=[...]`.

Two signatures are understood; which one a callable has is read from its signature:

* TRL's   f(completions, prompts=..., **columns) -> list[float]
          any callable with a parameter named `completions`. It is called by keyword:
          `completions` = the response texts, `prompts` = the prompt texts the model saw
          (chat template applied), and one list per data column (one value per sample):
          every key of the samples' `extra` (for in-memory datasets: every dataset column
          but the prompt, see verl.data.in_memory), `ground_truth` and `data_source`.
          A callable without **kwargs gets only the arguments it names; a required one the
          data lacks is a RewardError listing the columns there are.
* verl's  f(prompts, responses, samples) -> list[float]   (verl.rewards.base)
          any other callable that accepts three positional arguments.
* real verl's compute_score(data_source, solution_str, ground_truth, extra_info) per sample, or its
          batched form compute_score(data_sources, solution_strs, ...): a parameter named
          `solution_str` / `solution_strs` (verl.rewards.compute_score).

Anything else is a ConfigError naming the callable. In the config a callable is the
component {type: python, function: "module:qualname", name: ...}; the live object is kept
by the trainer and handed to the RewardManager under that component's name (the config
only records which function it was).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

from verl.errors import ConfigError
from verl.rewards.base import RewardError, RewardFn
from verl.rewards.compute_score import batched_fn, per_sample_fn, score_style

# Metric names the trainer writes itself under reward/ (a component of that name would overwrite them)
RESERVED_NAMES = ("mean", "max", "min", "errors", "overlong_penalty")


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


def _target(fn: Callable) -> Any:
    """The function behind a functools.partial (its name and module are the partial's)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def qualified_name(fn: Callable) -> str:
    """'module:qualname' of a function, or of the class of a callable object."""
    target = _target(fn)
    if not (inspect.isfunction(target) or inspect.ismethod(target) or inspect.isbuiltin(target)
            or inspect.isclass(target)):
        target = type(target)  # a callable instance: name its class
    module = getattr(target, "__module__", None) or "unknown"
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    return f"{module}:{qualname}"


def default_name(fn: Callable, index: int) -> str:
    """The metric name of reward_funcs[index]: its __name__, or reward_<index> for a lambda."""
    target = _target(fn)
    name = getattr(target, "__name__", None)
    if name is None or not (inspect.isfunction(target) or inspect.ismethod(target) or inspect.isbuiltin(target)):
        name = type(target).__name__  # a callable instance
    return f"reward_{index}" if name == "<lambda>" else name


def is_unloadable(spec: Optional[str]) -> bool:
    """True for 'module:qualname' of a lambda or a nested function (no import can find it)."""
    return bool(spec) and "<" in spec.rsplit(":", 1)[-1]


# ---------------------------------------------------------------------------
# Signatures -> a batch reward function
# ---------------------------------------------------------------------------


def signature_style(fn: Callable, where: str) -> str:
    """'trl', 'verl', 'per_sample' or 'batched' (rule in the module doc); a ConfigError for anything else."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "verl"  # no readable signature (some builtins): called as verl's f(prompts, responses, samples)
    params = sig.parameters
    style = score_style(params)
    if style:
        return style
    if "completions" in params:
        if params["completions"].kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ConfigError(f"{where}: 'completions' is positional-only; TRL-style rewards are called by keyword")
        return "trl"
    try:
        sig.bind(None, None, None)
    except TypeError:
        shown = f"{getattr(_target(fn), '__name__', type(fn).__name__)}{sig}"
        raise ConfigError(f"{where}: cannot tell how to call {shown}; a reward function is either "
                          f"f(completions, prompts=None, **columns) (TRL) or f(prompts, responses, samples) (verl)"
                          ) from None
    return "verl"


def sample_columns(samples: list) -> dict[str, list]:
    """Per-column lists for TRL-style calls: the keys of every sample's `extra` (missing -> None),
    then `ground_truth` and `data_source` unless a column of that name exists."""
    extras = [s.get("extra") or {} for s in samples]
    keys = dict.fromkeys(k for e in extras for k in e)
    columns = {k: [e.get(k) for e in extras] for k in keys}
    columns.setdefault("ground_truth", [s.get("ground_truth") for s in samples])
    columns.setdefault("data_source", [s.get("data_source") for s in samples])
    return columns


def _trl_adapter(fn: Callable, label: str) -> RewardFn:
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    required = [n for n, p in params.items() if p.default is p.empty
                and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]

    def trl_reward(prompts, responses, samples):
        kwargs = {**sample_columns(samples), "prompts": list(prompts), "completions": list(responses)}
        if not takes_all:
            missing = [n for n in required if n not in kwargs]
            if missing:  # a wiring error, not a per-sample failure: on_error does not hide it
                raise RewardError(f"reward {label} needs the column(s) {', '.join(missing)}; the data has: "
                                  f"{', '.join(sorted(kwargs))}")
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        return fn(**kwargs)

    trl_reward.__name__ = getattr(_target(fn), "__name__", "reward")
    return trl_reward


def as_reward_fn(fn: Callable, where: str, label: Optional[str] = None, kwargs: Optional[dict] = None) -> RewardFn:
    """A batch reward function fn(prompts, responses, samples) calling `fn` in its own signature;
    `kwargs` (real verl's reward_kwargs) go to a compute_score's every call."""
    if not callable(fn):
        raise ConfigError(f"{where}: expected a callable, got {type(fn).__name__}")
    style = signature_style(fn, where)
    if kwargs and style not in ("per_sample", "batched"):
        raise ConfigError(f"{where}: reward kwargs are passed to real verl's compute_score(data_source, "
                          f"solution_str, ...) only; {label or qualified_name(fn)} has another signature")
    if style in ("per_sample", "batched"):
        try:
            return (per_sample_fn if style == "per_sample" else batched_fn)(fn, where, kwargs)
        except TypeError as exc:  # a signature real verl could not call either
            raise ConfigError(str(exc)) from None
    if style == "trl":
        return _trl_adapter(fn, label or qualified_name(fn))
    return fn


# ---------------------------------------------------------------------------
# reward_funcs=[...] -> reward_fn components + the live functions
# ---------------------------------------------------------------------------


def _as_list(reward_funcs) -> list:
    if isinstance(reward_funcs, (list,)):
        return list(reward_funcs)
    if isinstance(reward_funcs, tuple) and not (len(reward_funcs) == 2 and isinstance(reward_funcs[0], str)
                                                 and callable(reward_funcs[1])):
        return list(reward_funcs)
    return [reward_funcs]  # one callable, spec or (name, fn) pair


def _section_of(item, where: str, reward_types) -> tuple[dict, Optional[Callable]]:
    """(reward_fn section without its final name, live callable or None) for one reward_funcs item."""
    if isinstance(item, tuple):
        if len(item) != 2 or not isinstance(item[0], str) or not callable(item[1]):
            raise ConfigError(f"{where}: a tuple must be (name, callable), got {item!r}")
        return {"name": item[0]}, item[1]
    if callable(item):
        return {}, item
    if isinstance(item, str):
        if item in reward_types and item not in ("python", "combined"):
            return {"type": item}, None
        if ":" in item:
            return {"type": "python", "function": item}, None
        raise ConfigError(f"{where}: '{item}' is neither a reward type ({', '.join(reward_types)}) nor "
                          f"'path/to/file.py:function_name'")
    if isinstance(item, dict):
        section = dict(item)
        fn = section.get("function")
        if callable(fn):
            if section.get("type", "python") != "python":
                raise ConfigError(f"{where}.type: a callable 'function' needs type python, got {section['type']!r}")
            del section["function"]
            section.pop("type", None)
            return section, fn
        return section, None
    raise ConfigError(f"{where}: expected a callable, a (name, callable) pair, a reward type name or a "
                      f"reward_fn dict, got {type(item).__name__}")


def reward_components(reward_funcs, reward_weights=None) -> tuple[list[dict], dict[str, RewardFn]]:
    """(reward_fn component sections, {component name: batch reward function}) for `reward_funcs`.

    Names: a (name, fn) pair's or a dict's `name`, else the function's __name__ (reward_<i>
    for a lambda), else the reward type; repeats get _2, _3, ... Weights: `reward_weights`
    (one per item) or each dict's `weight`, default 1.
    """
    from verl.rewards.registry import REWARD_TYPES

    items = _as_list(reward_funcs)
    if not items:
        raise ConfigError("reward_funcs: empty; pass at least one callable or reward type")
    if reward_weights is not None:
        if isinstance(reward_weights, (int, float)) or len(reward_weights) != len(items):
            raise ConfigError(f"reward_weights: needs one weight per reward function ({len(items)}), "
                              f"got {reward_weights!r}")
    sections, live, taken = [], {}, set()
    for i, item in enumerate(items):
        where = f"reward_funcs[{i}]"
        section, fn = _section_of(item, where, REWARD_TYPES)
        if fn is not None:
            signature_style(fn, where)  # fail now, not at the first step
            section = {**section, "type": "python", "function": qualified_name(fn)}
            section["name"] = section.get("name") or default_name(fn, i)
        if reward_weights is not None:
            if "weight" in section:
                raise ConfigError(f"{where}: a weight given twice (reward_weights[{i}] and the dict's 'weight')")
            section["weight"] = reward_weights[i]
        base = name = section.get("name") or section.get("type", "string_match")
        k = 1
        while name in taken:  # a repeated name gets _2, _3, ...
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        if name in RESERVED_NAMES:
            raise ConfigError(f"{where}: the name '{name}' would overwrite the metric reward/{name}; "
                              f"name it with a (name, function) pair")
        section["name"] = name
        sections.append(section)
        if fn is not None:
            live[name] = as_reward_fn(fn, where, label=f"'{name}' ({section['function']})")
    return sections, live
