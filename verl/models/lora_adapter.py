"""A saved peft LoRA adapter to start training from (`model.lora.adapter_path`): its folder is checked and its
adapter_config.json read when the config is built, so that a missing folder or a mismatch is one line, before
any weights load.

    settings = read_adapter(path, "model.lora.adapter_path")    # rank, alpha, dropout, targets of the adapter
    adopt(lora_cfg, settings, "model.lora")                     # the adapter's settings become the section's

The adapter's own settings win, as peft's PeftModel.from_pretrained (which real verl calls) builds the adapter
from its adapter_config.json whatever else the run says: a key left at its default takes the adapter's value; a
key set to another value than the adapter's is refused (one line naming both). The weights are then loaded by
verl.models.lora.apply_lora (PeftModel.from_pretrained(..., is_trainable=True)).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from verl.errors import ConfigError

CONFIG_FILE = "adapter_config.json"


@dataclass(frozen=True)
class AdapterSettings:
    path: str  # the folder, absolute
    rank: int
    alpha: float
    dropout: float
    target_modules: Any  # a list of module names or a regex, as peft saved it
    exclude_modules: Any


def read_adapter(path: str, key: str) -> AdapterSettings:
    """The settings of the peft LoRA adapter saved in folder `path`; ConfigError naming `key` when it is not one."""
    folder = os.path.abspath(os.path.expanduser(str(path)))
    if not os.path.isdir(folder):
        raise ConfigError(f"{key}: LoRA adapter folder '{path}' not found (looked at {folder})")
    config_path = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise ConfigError(f"{key}: '{path}' holds no {CONFIG_FILE}: not a saved peft adapter (save one with "
                          f"PeftModel.save_pretrained, or checkpoint.save_mode: lora)")
    try:
        with open(config_path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{key}: cannot read {config_path}: {exc}") from None
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA" or "r" not in cfg:
        raise ConfigError(f"{key}: {config_path} is not a LoRA adapter's (peft_type {cfg.get('peft_type')!r}, "
                          f"r {cfg.get('r')!r})")
    if cfg.get("use_dora") or cfg.get("use_rslora"):
        raise ConfigError(f"{key}: {config_path} is a {'DoRA' if cfg.get('use_dora') else 'rsLoRA'} adapter; "
                          f"only plain LoRA adapters train here")
    return AdapterSettings(path=folder, rank=int(cfg["r"]), alpha=float(cfg.get("lora_alpha", 8)),
                           dropout=float(cfg.get("lora_dropout", 0.0) or 0.0),
                           target_modules=cfg.get("target_modules"), exclude_modules=cfg.get("exclude_modules"))


def _same(ours, theirs) -> bool:
    if isinstance(ours, (list, tuple, set)) and isinstance(theirs, (list, tuple, set)):
        return set(ours) == set(theirs)
    return ours == theirs


def adopt(lora_cfg, settings: AdapterSettings, path: str, defaults: dict) -> None:
    """Set lora_cfg's rank / alpha / dropout / target_modules / exclude_modules to the adapter's. `defaults`: each
    key's declared default; a key at another value that differs from the adapter's is refused."""
    theirs = {"rank": settings.rank, "alpha": settings.alpha, "dropout": settings.dropout,
              "target_modules": settings.target_modules, "exclude_modules": settings.exclude_modules}
    for name, value in theirs.items():
        ours = getattr(lora_cfg, name)
        if not _same(ours, defaults[name]) and not _same(ours, value):
            raise ConfigError(f"{path}.{name}: {ours!r} differs from the adapter's {value!r} "
                              f"({os.path.join(settings.path, CONFIG_FILE)}); the adapter's own settings are "
                              f"used: leave {path}.{name} out or give {value!r}")
        setattr(lora_cfg, name, value)
