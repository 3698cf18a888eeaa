"""Real verl's defaults, for the keys our translation table does not translate (real_verl_defaults.yaml)
and for the table's rows whose default here differs from real verl's.

A real key outside the table is accepted only at real verl's default, where it changes nothing there
either (`at_real_default`); at any other value it is refused with one line, since we would silently
train something else.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import yaml

from verl.compat.hydra_args import shown
from verl.compat.real_keys import MANUAL, NO_DEFAULT, same_value
from verl.compat.real_verl import TABLE
from verl.errors import ConfigError

_DEFAULTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_verl_defaults.yaml")


@functools.lru_cache(maxsize=1)
def real_defaults() -> dict:
    """Real verl's defaults of the keys the table does not translate (real_verl_defaults.yaml)."""
    with open(_DEFAULTS_FILE, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def at_real_default(key: str, value: Any, where: str = "") -> bool:
    """True for a key outside the table given at real verl's default (no effect there either);
    another value of such a key is refused; False for a key real verl's config does not have.
    where: the config file it came from ("" for the command line)."""
    defaults = real_defaults()
    if key not in defaults:
        return False
    if isinstance(defaults[key], str) and "${" in defaults[key]:
        return bool(where)  # derived from other keys: a config file's copy is accepted, a command line's not
    if same_value(value, defaults[key]) or value == defaults[key]:
        return True
    default = "null" if defaults[key] is None else json.dumps(defaults[key])
    raise ConfigError(f"real verl's {key}={shown(value)}{where} is not supported: it has no equivalent here; only "
                      f"its default {default} (no effect) is accepted (see {MANUAL})")


def is_real_default(key: str, value: Any) -> bool:
    """The value is real verl's default for a table row whose default here differs from it."""
    entry = TABLE.get(key)
    if entry is None or entry.real_default is NO_DEFAULT:
        return False
    expand = (lambda v: os.path.expanduser(v) if isinstance(v, str) else v)
    return same_value(expand(value), expand(entry.real_default))
