"""Real verl's command-line overrides as Hydra writes them, read and written back for our own overrides.

    parse_args(["data.train_batch_size=8", "+actor_rollout_ref.model.override_config.x=1e-6"])
        -> [("data.train_batch_size", 8), ("actor_rollout_ref.model.override_config.x", 1e-06)]
    dump_value(1e-06) -> "1.0e-06"      (our YAML override parser reads it back as the same float)

Written here rather than taken from hydra-core: Hydra would compose real verl's whole config tree,
which is not installed with us; we need only its override grammar's simple cases (`key=value`, `+`/`++`
prefixes, YAML values, bare floats) and refuse the rest with one line.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml

from verl.compat.real_keys import MANUAL
from verl.compat.real_verl import lookup
from verl.errors import ConfigError

_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def parse_value(raw: str) -> Any:
    """A Hydra override value: YAML, with Hydra's bare floats such as 1e-6 read as numbers."""
    if raw == "":
        return ""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw  # Hydra keeps unparsable text as a string
    if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
        return float(value)
    return value


def _flatten(key: str, value: Any, out: list) -> None:
    """A dict value under a key the table has no row for is its leaves (`a={b: 1}` is `a.b=1`)."""
    if isinstance(value, dict) and value and lookup(key) is None:
        for sub, v in value.items():
            _flatten(f"{key}.{sub}", v, out)
    else:
        out.append((key, value))


def parse_args(argv: list[str]) -> list[tuple[str, Any]]:
    """(key, value) pairs of `key=value` overrides, in order; a deletion (`~key`), a Hydra option (`-m`,
    `--cfg`, ...) or an item without `=` is refused with one line."""
    pairs: list[tuple[str, Any]] = []
    for item in argv:
        if item.startswith("~"):
            raise ConfigError(f"{item}: deleting keys (Hydra '~') is not supported here; see {MANUAL}")
        if item.startswith("-"):
            raise ConfigError(f"{item}: real verl's Hydra option is not supported here (only --config-path and "
                              f"--config-name are read); pass key=value overrides (see {MANUAL})")
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.path=value")
        key, raw = item.split("=", 1)
        key = key.strip().lstrip("+")
        if not key:
            raise ConfigError(f"override '{item}' has no key")
        _flatten(key, parse_value(raw), pairs)
    return pairs


def dump_value(value: Any) -> str:
    """JSON that our YAML override parser reads back as the same value (floats stay floats)."""
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, _, exp = text.partition("e")
        if exp:  # YAML 1.1 floats need a '.' and a signed exponent: 1e-06 -> 1.0e-06
            text = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exp if exp[0] in '+-' else '+' + exp}"
        return text
    return json.dumps(value)


def shown(value: Any) -> str:
    """A value as an error line or note shows it: null, JSON for lists and dicts, else its text."""
    return "null" if value is None else json.dumps(value) if isinstance(value, (list, dict)) else str(value)
