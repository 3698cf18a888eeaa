"""Real verl's `--config-path DIR --config-name NAME`: a Hydra YAML read as key=value pairs.

    pairs = read_config(["--config-path=my_cfgs", "--config-name=grpo_gsm8k"])   # my_cfgs/grpo_gsm8k.yaml
    # [("data.train_batch_size", 256), ("actor_rollout_ref.rollout.name", "sglang"), ...]

The file is flattened into dotted keys (`a: {b: 1}` -> `a.b=1`), which the translation then reads
as if typed before the command line's own overrides (those win). Hydra's `defaults:` list is
followed: entries naming another YAML of the same folder are read first (the file's own keys
win, as with `_self_` last); `ppo_trainer` is real verl's packaged config, whose values are the
defaults the translation table already applies, so it adds nothing; `ppo_megatron_trainer` is
ppo_trainer with `model_engine: megatron` there, and that one key here (verl.compat.real_engines). Without a file of that name in the folder, the names `ppo_trainer` and
`ppo_megatron_trainer` mean the packaged configs too (real verl resolves a relative
--config-path against its own package; `--config-path=config` in its examples is that).
Hydra's `???` (a required value) is skipped; `hydra:` and `_target_` entries are dropped.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from verl.config.yaml_io import read_yaml
from verl.errors import ConfigError

PACKAGED = ("ppo_trainer", "ppo_megatron_trainer", "ppo_trainer.yaml", "ppo_megatron_trainer.yaml")


def split_options(argv: list[str]) -> tuple[Optional[str], Optional[str], list[str]]:
    """(config path, config name, the other arguments); `--opt value` and `--opt=value` forms."""
    path = name = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        for flag in ("--config-path", "--config-name", "-cp", "-cn"):
            if arg == flag or arg.startswith(flag + "="):
                if arg == flag:
                    if i + 1 >= len(argv):
                        raise ConfigError(f"{flag}: needs a value")
                    value, i = argv[i + 1], i + 1
                else:
                    value = arg.split("=", 1)[1]
                if flag in ("--config-path", "-cp"):
                    path = value
                else:
                    name = value
                break
        else:
            rest.append(arg)
        i += 1
    return path, name, rest


def _file(path: Optional[str], name: str) -> Optional[str]:
    base = name if name.endswith((".yaml", ".yml")) else name + ".yaml"
    folder = os.path.expanduser(path or ".")
    candidate = os.path.join(folder, base)
    return candidate if os.path.isfile(candidate) else None


def _flatten(prefix: str, value: Any, out: dict) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def _read(path: Optional[str], name: str, seen: tuple) -> dict:
    stem = os.path.splitext(os.path.basename(name))[0]
    where = _file(path, name)
    if where is None:
        if stem == "ppo_trainer":
            return {}  # real verl's packaged defaults: the translation table applies them
        if stem == "ppo_megatron_trainer":
            return {"model_engine": "megatron"}  # real verl's: ppo_trainer with `override model_engine: megatron`
        raise ConfigError(f"--config-name={name}: no file {os.path.join(path or '.', stem + '.yaml')} "
                          f"(--config-path is read relative to the working directory)")
    if where in seen:
        raise ConfigError(f"{where}: its defaults list includes itself")
    doc = read_yaml(where)  # strict, as `verl train` (and OmegaConf, which refuses a key given twice too)
    flat: dict = {}
    for entry in doc.pop("defaults", None) or []:
        if entry == "_self_":
            continue
        if not isinstance(entry, str):
            raise ConfigError(f"{where}: defaults entry {entry!r} is not supported here (only names of YAML files "
                              f"in the same folder, or ppo_trainer)")
        flat.update(_read(os.path.dirname(where), entry, seen + (where,)))
    doc.pop("hydra", None)
    own: dict = {}
    _flatten("", doc, own)
    flat.update({k: v for k, v in own.items() if v != "???" and k.split(".")[-1] != "_target_"})
    return flat


def read_config(path: Optional[str], name: Optional[str]) -> tuple[dict, Optional[str]]:
    """({dotted key: value} of the file, its path for messages); ({}, None) without --config-name."""
    if name is None:
        if path is not None:
            raise ConfigError(f"--config-path={path}: needs --config-name (the YAML file's name)")
        return {}, None
    pairs = _read(path, name, ())
    return pairs, _file(path, name) or name
