"""The short Python API (docs/python_api.md):

    import verl
    trainer = verl.Trainer(model="tiny:gpt2", reward_funcs=[f, g], train_dataset=ds, algorithm="grpo",
                           training={"total_steps": 20, "lr": 1e-5}, overrides={"rollout.n": 4})
    trainer.train()

Keywords -> config keys, later ones winning over the `config` file:
    config         a YAML path or a dict laid out like one (the starting point; default: the defaults)
    model          model.name (hub name, local folder, tiny:<arch>), or a dict: the model section
    algorithm      algorithm.name (ppo, grpo, ...), or a dict: the algorithm section
    <section>=...  a dict for a section (training=, rollout=, data=, ...), or a value for a top-level
                   key (seed=, device=)
    overrides      {"training.lr": 1e-5, ...} (Python values), or ["training.lr=1e-5", ...] (YAML text,
                   as on the command line)
One key set by two of the keywords is a ConfigError. reward_funcs, reward_weights, train_dataset
and eval_dataset are the Trainer's (verl.trainer.inputs).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from verl.config import Config, config_from_dict, read_yaml, resolve_relative_paths
from verl.errors import ConfigError
from verl.trainer.trainer import Trainer as _Trainer


def _flatten(prefix: str, value: Any, out: list, where: str) -> None:
    """(dotted key, value, where) for every leaf of a nested dict; lists and scalars are leaves."""
    if isinstance(value, dict):  # an empty dict sets nothing
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out, where)
    else:
        out.append((prefix, value, where))


def _shortcut(key: str, value: Any, leaf: str, out: list) -> None:
    """`model="gpt2"` -> model.name; `model={...}` -> the model section."""
    if isinstance(value, (str, os.PathLike)):
        out.append((f"{key}.{leaf}", os.fspath(value), f"{key}="))
    elif isinstance(value, dict):
        _flatten(key, value, out, f"{key}=")
    else:
        what = " (a loaded model object: save_pretrained it and pass the folder)" if key == "model" else ""
        raise ConfigError(f"{key}: expected a name or a dict of {key} keys, got {type(value).__name__}{what}")


def _set(data: dict, dotted: str, value: Any, where: str) -> None:
    node = data
    keys = dotted.split(".")
    for k in keys[:-1]:
        if node.get(k) is None:  # absent, or an empty section in the YAML file
            node[k] = {}
        node = node[k]
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: '{dotted}': '{k}' is not a section")
    node[keys[-1]] = value


def make_config(config: Any = None, *, model: Any = None, algorithm: Any = None, overrides: Any = None,
                **sections) -> Config:
    """A finished Config from the keywords of `verl.Trainer` (rules in the module doc)."""
    if isinstance(config, Config):
        raise ConfigError("config: pass a YAML path or a dict; a finished Config goes to "
                          "verl.create_trainer(config, reward_funcs=..., train_dataset=...)")
    if config is None:
        data = {}
    elif isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        data = resolve_relative_paths(read_yaml(path), os.path.dirname(os.path.abspath(path)))
    elif isinstance(config, dict):
        import copy

        data = copy.deepcopy(config)
    else:
        raise ConfigError(f"config: expected a YAML path or a dict, got {type(config).__name__}")
    assignments: list[tuple[str, Any, str]] = []
    if model is not None:
        _shortcut("model", model, "name", assignments)
    if algorithm is not None:
        _shortcut("algorithm", algorithm, "name", assignments)
    for key, value in sections.items():
        _flatten(key, value, assignments, f"{key}=")
    text_overrides = None
    if isinstance(overrides, dict):
        for key, value in overrides.items():
            _flatten(str(key), value, assignments, f"overrides[{key!r}]")
    elif isinstance(overrides, (list, tuple)):
        text_overrides = list(overrides)  # "a.b=value" strings, parsed as YAML by config_from_dict
    elif overrides is not None:
        raise ConfigError(f"overrides: expected a dict of dotted keys or a list of 'key=value' strings, "
                          f"got {type(overrides).__name__}")
    seen: dict[str, str] = {}
    for dotted, value, where in assignments:
        if dotted in seen:
            raise ConfigError(f"{dotted}: set twice ({seen[dotted]} and {where}); keep one")
        seen[dotted] = where
        _set(data, dotted, value, where)
    if text_overrides:
        from verl.config import parse_overrides

        for key, _ in parse_overrides(text_overrides):
            if key in seen:
                raise ConfigError(f"{key}: set twice ({seen[key]} and overrides); keep one")
    return config_from_dict(data, text_overrides)


class Trainer(_Trainer):
    """verl's Trainer, built from keywords (docs/python_api.md); `.train()`, `.step()`,
    `.actor.model` and the rest are `verl.trainer.trainer.Trainer`'s."""

    def __init__(self, model: Any = None, reward_funcs: Any = None, train_dataset: Any = None,
                 eval_dataset: Any = None, algorithm: Any = None, *, reward_weights: Optional[list] = None,
                 config: Any = None, overrides: Any = None, **sections):
        cfg = make_config(config, model=model, algorithm=algorithm, overrides=overrides, **sections)
        super().__init__(cfg, reward_funcs=reward_funcs, reward_weights=reward_weights,
                         train_dataset=train_dataset, eval_dataset=eval_dataset)
