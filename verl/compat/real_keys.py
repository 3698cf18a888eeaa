"""The parts of real verl's key table (verl.compat.real_verl.TABLE) that its row modules share: the entry type
`RealKey`, value checks in real verl's types whose errors name the real key, and the converter factories each
row is written with (`to`, `custom`, `reads`, `ignored`, `only`, `same_as`). The table's rows live in
real_verl.py, real_rewards.py and real_verl_vision.py; the converters that read other keys in real_converters.py.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from verl.errors import ConfigError

NO_DEFAULT = object()
MANUAL = "docs/real_verl.md"
ARR = "actor_rollout_ref"
ACTOR, ROLLOUT = f"{ARR}.actor", f"{ARR}.rollout"

Convert = Callable[[Any, Any, str], dict]


@dataclass(frozen=True)
class RealKey:
    convert: Optional[Convert]
    target: str
    default: Any = NO_DEFAULT
    real_default: Any = NO_DEFAULT
    note: str = ""
    phase: int = 1
    identity: Optional[str] = None  # our key this one sets unchanged (a native key of that name is read back)
    dict_value: bool = False  # its value is a dict: `key.a.b=v` overrides are gathered into it

    @property
    def ignored(self) -> bool:
        return self.convert is None


# ---------------------------------------------------------------------------
# Value checks (real verl types; errors name the real key)
# ---------------------------------------------------------------------------


def as_int(value, key: str, low: Optional[int] = None) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
    if not number.is_integer():
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if low is not None and number < low:
        raise ConfigError(f"{key}: must be >= {low}, got {value!r}")
    return int(number)


def as_float(value, key: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected a number, got {value!r}") from None


def as_bool(value, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{key}: expected True or False, got {value!r}")


def refuse(key: str, value, why: str) -> ConfigError:
    """The one line for a real verl setting that has no equivalent here."""
    shown = "null" if value is None else value
    return ConfigError(f"real verl's {key}={shown} is not supported: {why} (see {MANUAL})")


def pick(value, key: str, choices: dict, what: str = "") -> Any:
    if value not in choices:
        raise refuse(key, value, f"no equivalent here{what}; supported: {', '.join(map(str, choices))}")
    return choices[value]


def module_names(value, key: str):
    """peft's exclude_modules / target_modules value: a regex (one string) or a list of module names."""
    if isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
        return value if isinstance(value, str) else list(value)
    raise ConfigError(f"{key}: expected a regex or a list of module names, got {value!r}")


def expand_path(value) -> str:
    return os.path.expanduser(str(value))


def expand_paths(value, key: str) -> list:
    if isinstance(value, (list, tuple)):
        return [expand_path(v) for v in value]
    if isinstance(value, str):
        return [expand_path(value)]
    raise ConfigError(f"{key}: expected a file or a list of files, got {value!r}")


# ---------------------------------------------------------------------------
# Converter factories
# ---------------------------------------------------------------------------


def to(target: str, kind: Optional[Callable] = None, **extra) -> dict:
    """One real key -> one of ours; `kind` checks/converts the value (as_int, as_float, ...). null sets
    nothing (our default holds), as an unset key in real verl."""

    def convert(value, ctx, key):
        if value is None:
            return {}
        return {target: value if kind is None else kind(value, key)}

    return dict(convert=convert, target=target, identity=target if kind is None or kind in (as_int, as_float, as_bool)
                else None, **extra)


def custom(fn: Convert, target: str, **extra) -> dict:
    return dict(convert=fn, target=target, **extra)


def reads(target: str, **extra) -> dict:
    """Read by another entry's converter (named in `target`); sets nothing itself."""
    return dict(convert=lambda value, ctx, key: {}, target=f"(read: {target})", **extra)


def ignored(note: str, **extra) -> dict:
    return dict(convert=None, target="(ignored)", note=note, **extra)


def same_value(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def only(*allowed, why: str = "", **extra) -> dict:
    """Accepted only with a value that has no effect (real verl's default); others are refused."""

    def convert(value, ctx, key):
        if not any(same_value(value, a) for a in allowed):
            shown = " or ".join("null" if a is None else repr(a) for a in allowed)
            raise refuse(key, value, f"{why or 'it has no equivalent here'}; only {shown} is accepted")
        return {}

    shown = ", ".join("null" if a is None else str(a) for a in allowed)
    return dict(convert=convert, target=f"(only {shown})", note=f"other values refused: {why}" if why else "", **extra)


def same_as(actor_key: str, our_key: str) -> dict:
    """A critic key whose value is shared with the actor here: accepted when equal to the actor's."""

    def convert(value, ctx, key):
        actor = ctx.get(actor_key)
        if not same_value(value, actor):
            raise ConfigError(f"{key}={value!r} differs from {actor_key}={actor!r}: here the actor and the critic "
                              f"share one {our_key}; give both the same value (see {MANUAL})")
        return {}

    return dict(convert=convert, target=f"(= {actor_key})", note=f"one {our_key} for actor and critic here")


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest d <= cap dividing n (the default micro-batch: micro-batching does not change results)."""
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def steps_from_epochs(num_prompts: int, batch: int, epochs: int) -> int:
    """Real verl's count: full batches per epoch (the dataloader drops the last partial one) x epochs."""
    return math.floor(num_prompts / batch) * epochs
