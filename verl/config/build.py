"""Building a Config from plain data: types coerced with errors that name the key, unknown keys
refused with a suggestion, overrides applied, then the whole config finalized (preset, checks,
derived values): `load_config` returns a config nothing downstream needs to check again."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import types
import typing
from typing import Any, Optional

from verl.config.keys import is_key, section_path
from verl.config.paths import resolve_relative_paths
from verl.config.reward_fn import RewardFnConfig
from verl.config.root import Config
from verl.config.yaml_io import parse_overrides, read_yaml, set_dotted
from verl.errors import ConfigError

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1

def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], path)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping (section), got {value!r}")
        return build_section(tp, value, path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{path}: expected an integer, got {value!r}") from None
        if not INT64_MIN <= number <= INT64_MAX:  # torch, numpy and the file formats hold 64-bit integers
            raise ConfigError(f"{path}: {number} does not fit in a 64-bit integer")
        return number
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (ValueError, OverflowError):
            raise ConfigError(f"{path}: expected a number, got {value!r}") from None
        if not math.isfinite(number):
            # NaN passes every `x > 0` check as false and every `x < 0` check as false: a NaN
            # clip disables clipping, a NaN lr corrupts the weights. No key means NaN or infinity.
            raise ConfigError(f"{path}: must be a finite number, got {value!r}")
        return number
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return str(value)
    if tp is list or origin is list:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]  # a single file or prompt is a list of one
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        item_types = typing.get_args(tp)
        if item_types == (str,):
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise ConfigError(f"{path}[{i}]: expected a string, got {item!r}"
                                      + (f" (quote it: '{item}')" if isinstance(item, (int, float)) else ""))
        return list(value)
    return value


def build_section(cls, data: dict, path: str = ""):
    """Build dataclass `cls` from `data`, rejecting unknown keys with a suggestion."""
    if data is None:
        data = {}
    fields = {f.name: f for f in dataclasses.fields(cls) if is_key(f)}
    kwargs = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.5)
            hint = f"; did you mean '{(path + '.') if path else ''}{close[0]}'?" if close else ""
            valid = ", ".join(sorted(fields))
            raise ConfigError(f"unknown config key '{key_path}'{hint} (valid keys here: {valid})")
        hints = typing.get_type_hints(cls)
        if cls is RewardFnConfig and key == "components":  # combined: a list of reward sections
            if not isinstance(value, list):
                raise ConfigError(f"{key_path}: expected a list of sections, got {value!r}")
            kwargs[key] = [build_section(RewardFnConfig, v, f"{key_path}[{i}]") for i, v in enumerate(value)]
        else:
            kwargs[key] = _coerce(value, hints[key], key_path)
    with section_path(path):  # the section's own checks run in its __post_init__ and name keys from here
        return cls(**kwargs)


def config_from_dict(data: dict, overrides: Optional[list[str]] = None, platform=None) -> Config:
    """platform: Config.finalize's (None: this machine's)."""
    data = dict(data or {})
    for key, raw in parse_overrides(overrides or []):
        set_dotted(data, key, raw)
    return build_section(Config, data).finalize(platform)


def load_config(path: Optional[str] = None, overrides: Optional[list[str]] = None, platform=None) -> Config:
    """Load a YAML config (or the defaults when `path` is None), apply overrides, validate.
    Relative paths inside the file are read from the file's folder first, then from the
    working directory (see resolve_relative_paths).

    >>> cfg = load_config("config_gpt2.yaml", ["training.lr=1e-5"])
    >>> cfg.training.total_steps
    """
    data = read_yaml(path) if path else {}
    if path:
        data = resolve_relative_paths(data, os.path.dirname(os.path.abspath(path)))
    config = config_from_dict(data, overrides, platform)
    config.data.config_file = path or ""
    return config
