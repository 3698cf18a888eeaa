"""`python` reward: a user function loaded once from `path/to/file.py:function_name`.

The function has the batch signature `fn(prompts, responses, samples) -> list[float]`
(see docs/rewards.md), TRL's `fn(completions, **columns)`, or real verl's
`compute_score(data_source, solution_str, ground_truth, extra_info)` per sample or batched
(see verl.rewards.callables; `reward_fn.kwargs` are passed to a compute_score).
A relative path is resolved against the working directory. If the part before ':' is not
a file path (no '.py', no such file), it is imported as a module instead
(`my_pkg.rewards:score`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import hashlib
import importlib
import importlib.util
import os

from verl.errors import ConfigError
from verl.rewards.base import RewardFn

_CACHE: dict[str, RewardFn] = {}


def load_function(spec: str) -> RewardFn:
    """Load (once per process) the callable named by 'file.py:function' or 'module:function'."""
    if spec in _CACHE:
        return _CACHE[spec]
    if ":" not in spec:
        raise ConfigError(f"reward_fn.function: '{spec}' must look like 'path/to/file.py:function_name'")
    where, func_name = spec.rsplit(":", 1)
    if where.endswith(".py") or os.sep in where or os.path.exists(where):
        path = os.path.abspath(os.path.expanduser(where))
        if not os.path.isfile(path):
            raise ConfigError(f"reward_fn.function: file '{where}' not found (looked at {path})")
        mod_name = "verl_user_reward_" + hashlib.sha1(path.encode()).hexdigest()[:12]
        file_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(file_spec)
        try:
            file_spec.loader.exec_module(module)
        except Exception as exc:
            raise ConfigError(f"reward_fn.function: importing '{where}' failed: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ConfigError(f"reward_fn.function: cannot import module '{where}': {exc}") from exc
    fn = getattr(module, func_name, None)
    if fn is None or not callable(fn):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        what = "has no function" if fn is None else "has a non-callable"
        raise ConfigError(f"reward_fn.function: '{where}' {what} '{func_name}' "
                          f"(callables defined there: {', '.join(public) or 'none'})")
    _CACHE[spec] = fn
    return fn


def build_python(cfg: RewardFnConfig) -> RewardFn:
    from verl.rewards.callables import as_reward_fn

    # TRL's f(completions, **columns) works too: the signature says which (verl.rewards.callables)
    return as_reward_fn(load_function(cfg.function), "reward_fn.function", label=cfg.function, kwargs=cfg.kwargs)
