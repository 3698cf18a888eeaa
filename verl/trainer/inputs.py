"""What a Trainer gets besides its Config: reward callables and in-memory datasets.

    config, inputs = attach_inputs(config, reward_funcs=[f, g], train_dataset=ds)

The returned config records them (callables as {type: python, function: "module:qualname"}
components of reward_fn, in-memory data as data.train_source / data.val_source descriptions;
paths go to data.train_files / data.val_files), so that config.yaml stays loadable. The live
objects travel in `RunInputs`: the functions to the RewardManager, the rows to the prompt
loaders. The caller's Config is not modified.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from verl.config import Config, RewardFnConfig, config_from_dict
from verl.errors import ConfigError
from verl.rewards.base import RewardFn


@dataclass
class RunInputs:
    functions: dict[str, RewardFn] = field(default_factory=dict)  # reward component name -> live function
    train_rows: Optional[list] = None  # PromptRows of an in-memory train_dataset
    val_rows: Optional[list] = None  # PromptRows of an in-memory eval_dataset


def _reward_sections(rf: RewardFnConfig, key: str = "reward_fn"):
    """(key path, section) of reward_fn and each of its components."""
    yield key, rf
    for i, c in enumerate(getattr(rf, "components", None) or []):
        yield from _reward_sections(c, f"{key}.components[{i}]")


def _reject_objects(config: Config) -> None:
    """Python objects assigned into a Config by hand (the config file cannot hold them)."""
    if not isinstance(config.reward_fn, RewardFnConfig):
        raise ConfigError(f"reward_fn: holds a {type(config.reward_fn).__name__}; pass Python reward functions as "
                          "reward_funcs=[f] to verl.Trainer or create_trainer (docs/python_api.md)")
    for key, rf in _reward_sections(config.reward_fn):
        if isinstance(rf, RewardFnConfig) and callable(rf.function):
            raise ConfigError(f"{key}.function: holds a Python callable; pass it as reward_funcs=[f] to "
                              "verl.Trainer or create_trainer (docs/python_api.md)")
    for key in ("train_files", "val_files"):
        for i, item in enumerate(getattr(config.data, key) or []):
            if not isinstance(item, (str, os.PathLike)):
                arg = "train_dataset" if key == "train_files" else "eval_dataset"
                raise ConfigError(f"data.{key}[{i}]: holds a {type(item).__name__}; pass in-memory data as "
                                  f"{arg}=... to verl.Trainer or create_trainer (docs/python_api.md)")


def _check_recorded(config: Config, inputs: RunInputs) -> None:
    """A config saved from a run on objects names them but cannot recreate them: say so."""
    from verl.rewards.callables import is_unloadable

    for key, rf in _reward_sections(config.reward_fn):
        name = rf.name or rf.type
        if rf.type == "python" and is_unloadable(rf.function) and name not in inputs.functions:
            raise ConfigError(f"{key}.function: '{rf.function}' is a lambda or nested function given to the Python "
                              "API; no import can load it: pass reward_funcs= again (or name a module-level function)")
    d = config.data
    if d.train_source and inputs.train_rows is None:
        raise ConfigError(f"data.train_source: the config was saved from a run on in-memory data ({d.train_source}); "
                          "pass train_dataset= again, or set data.train_files and drop data.train_source")
    if d.val_source and inputs.val_rows is None:
        raise ConfigError(f"data.val_source: the config was saved from a run on in-memory data ({d.val_source}); "
                          "pass eval_dataset= again, or set data.val_files and drop data.val_source")


def attach_inputs(config: Config, *, reward_funcs: Any = None, reward_weights: Any = None,
                  train_dataset: Any = None, eval_dataset: Any = None) -> tuple[Config, RunInputs]:
    """(the config recording the inputs, the live inputs); rules in the module doc.

    reward_funcs replaces reward_fn by {type: combined, components: [...]}, keeping the
    section's other keys (on_error, weight, ...); train_dataset / eval_dataset replace the data
    files.
    """
    _reject_objects(config)
    inputs = RunInputs()
    if reward_funcs is None and train_dataset is None and eval_dataset is None:
        if reward_weights is not None:
            raise ConfigError("reward_weights: given without reward_funcs")
        _check_recorded(config, inputs)
        return config, inputs
    from verl.data.in_memory import resolve_dataset

    data = config.to_dict()
    if reward_funcs is not None:
        from verl.rewards.callables import reward_components

        components, inputs.functions = reward_components(reward_funcs, reward_weights)
        # The section's own keys (on_error, weight, time limits) stay on the combined parent
        data["reward_fn"] = {**data["reward_fn"], "type": "combined", "name": None, "function": None,
                             "components": components}
    elif reward_weights is not None:
        raise ConfigError("reward_weights: given without reward_funcs")
    for arg, value, files_key, source_key, rows_attr in (
            ("train_dataset", train_dataset, "train_files", "train_source", "train_rows"),
            ("eval_dataset", eval_dataset, "val_files", "val_source", "val_rows")):
        if value is not None:
            paths, rows, description = resolve_dataset(value, config.data, arg)
            data["data"][files_key], data["data"][source_key] = paths, description
            setattr(inputs, rows_attr, rows)
    new = config_from_dict(data).carry_derived(config)
    if inputs.functions and new.distributed.backend == "ray":
        if any(rf.type == "huggingface_rm" for _, rf in _reward_sections(new.reward_fn)):
            raise ConfigError("reward_funcs: with a huggingface_rm component under distributed.backend: ray the "
                              "whole reward runs in Ray workers, which cannot receive Python callables; "
                              "use distributed.backend: none, or name the functions as 'file.py:function'")
    _check_recorded(new, inputs)
    return new, inputs
