"""What a config key is: its default, its allowed values, its bounds and its resume rule, declared
once on the section's dataclass field; and the checks that read those declarations.

    lr: float = key(1e-5, gt=0, doc="...")                       # a number > 0
    name: str = key("hf", choices="verl.rollout.registry:ENGINES")  # names from the implementing module
    micro_batch_size: int = key(4, ge=1, resume_safe=True)     # may change between checkpoint and resume

`choices` is a tuple, or "module:ATTRIBUTE" naming the registry that implements the values (an
estimator table, the reward types...), imported when a section is checked: the list of valid
names lives where the names are implemented. `unset` is the value a None key takes when the
algorithm preset does not set it either (see verl/config/algorithm.py). `resume_safe` keys may
differ between a checkpoint and the run that resumes it (they do not change the training math).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import importlib
import re
from typing import Any

from verl.errors import ConfigError

_MISSING = dataclasses.MISSING

# The dotted path of the section being built (build_section sets it, e.g. "reward_fn.components[1]"),
# so that a section's own checks name the key as the user wrote it.
_SECTION_PATH: contextvars.ContextVar = contextvars.ContextVar("section_path", default=None)


@contextlib.contextmanager
def section_path(path: str):
    token = _SECTION_PATH.set(path)
    try:
        yield
    finally:
        _SECTION_PATH.reset(token)


def current_path(default: str) -> str:
    """The path of the section being built, else `default` (a section built on its own)."""
    return _SECTION_PATH.get() or default


def key(default: Any = None, *, factory=None, choices=None, ge=None, gt=None, unit=None, resume_safe: bool = False,
        unset: Any = _MISSING):
    """A dataclass field carrying the key's rules in its metadata (see the module docstring).
    unit: "[0, 1]" or "(0, 1]" for fractions."""
    meta = {"choices": choices, "ge": ge, "gt": gt, "unit": unit, "resume_safe": resume_safe, "unset": unset}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def derived(default: Any):
    """A field verl fills while the config is finished (verl/config/auto.py: what `auto` chose), not a
    key: a file or an override cannot set it, and Config.to_dict() (the saved and logged config) leaves
    it out."""
    return dataclasses.field(default=default, metadata={"derived": True})


def is_key(f: dataclasses.Field) -> bool:
    """Whether dataclass field `f` is a config key (not a derived field)."""
    return not f.metadata.get("derived", False)


def resolve_choices(choices) -> tuple:
    """A choices declaration as a tuple of allowed values ("module:ATTR" is imported; a dict gives its keys)."""
    if isinstance(choices, str):
        module, attr = choices.split(":")
        choices = getattr(importlib.import_module(module), attr)
    return tuple(choices)


def did_you_mean(value, allowed) -> str:
    """'; did you mean 'x'?' for the closest allowed spelling of a mistyped value, else ''."""
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def check_choice(value, allowed, key_path: str) -> None:
    allowed = resolve_choices(allowed)
    if value not in allowed:
        raise ConfigError(f"{key_path}: '{value}' is not one of {', '.join(map(str, allowed))}"
                          f"{did_you_mean(value, allowed)}")


def at_least(value, low, key_path: str) -> None:
    if value is None or value < low:
        raise ConfigError(f"{key_path}: must be >= {low}, got {value}")


def positive(value, key_path: str) -> None:
    if value is None or not value > 0:
        raise ConfigError(f"{key_path}: must be > 0, got {value}")


def at_most(value, high, key_path: str, why: str) -> None:
    if value is not None and value > high:
        raise ConfigError(f"{key_path}: {value} is larger than {high:,} ({why})")


def in_unit(value, key_path: str, low_open: bool = False) -> None:
    ok = (0 < value <= 1) if low_open else (0 <= value <= 1)
    if not ok:
        raise ConfigError(f"{key_path}: must be in {'(0, 1]' if low_open else '[0, 1]'}, got {value}")


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_name(value, key_path: str) -> None:
    """An `*_env` key names an environment variable that holds a secret. A value that is not a
    variable name is most likely the secret itself: it is hidden from everything verl prints
    from now on (verl/redact.py) and refused without being shown."""
    if isinstance(value, str) and ENV_NAME.fullmatch(value):
        return
    from verl.redact import register_secret

    register_secret(str(value))
    raise ConfigError(f"{key_path}: expects the NAME of an environment variable that holds the secret (letters, "
                      f"digits and _, e.g. MY_API_KEY), and what was given is not one; it is not shown, in case "
                      f"it is the secret itself: export it as a variable and give the variable's name")


class Section:
    """Base of every config section: its declared key rules are checked when it is built (from a
    file, an override or Python code), then its own `validate(path)` for rules that involve
    several of its keys. Cross-section rules live in verl/config/root.py."""

    SECTION = ""  # the section's key path when it is built on its own

    def __post_init__(self):
        self.check(current_path(self.SECTION))

    def check(self, path: str) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(value, Section):
                continue
            meta, key_path = f.metadata, f"{path}.{f.name}" if path else f.name
            if meta.get("choices") is not None:
                for item in value if isinstance(value, list) else [value]:
                    check_choice(item, meta["choices"], key_path)
            if meta.get("ge") is not None:
                at_least(value, meta["ge"], key_path)
            if meta.get("gt") is not None and not value > meta["gt"]:
                raise ConfigError(f"{key_path}: must be > {meta['gt']}, got {value}")
            if meta.get("unit") is not None:
                in_unit(value, key_path, low_open=meta["unit"] == "(0, 1]")
            if f.name.endswith("_env"):
                check_env_name(value, key_path)
        self.validate(path)

    def validate(self, path: str) -> None:
        """Checks across this section's own keys (override in a section)."""

    def fill_unset(self) -> None:
        """Keys still None take their declared `unset` value (after the preset had its say)."""
        for f in dataclasses.fields(self):
            if getattr(self, f.name) is None and f.metadata.get("unset", _MISSING) is not _MISSING:
                setattr(self, f.name, f.metadata["unset"])


def resume_safe_keys(cls, prefix: str = "") -> list[str]:
    """Dotted keys of `cls` (and its subsections) declared resume_safe; a section class with
    RESUME_SAFE = True is safe as a whole (its own name is returned)."""
    if getattr(cls, "RESUME_SAFE", False):
        return [prefix.rstrip(".")]
    out = []
    import typing

    hints = typing.get_type_hints(cls)
    for f in filter(is_key, dataclasses.fields(cls)):
        tp = hints[f.name]
        if isinstance(tp, type) and issubclass(tp, Section):
            out += resume_safe_keys(tp, f"{prefix}{f.name}.")
        elif f.metadata.get("resume_safe"):
            out.append(prefix + f.name)
    return out
