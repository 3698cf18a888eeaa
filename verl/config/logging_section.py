"""`logging` section: where metrics go and how much is printed. Safe to change on resume."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.config.keys import Section, did_you_mean, key, resolve_choices
from verl.errors import ConfigError


@dataclass
class LoggingConfig(Section):
    SECTION = "logging"
    RESUME_SAFE = True
    backends: list[str] = key(factory=lambda: ["console", "jsonl"])  # of verl.tracking.tracker.KNOWN_BACKENDS
    project: str = "verl"
    run_name: Optional[str] = None
    # auto (online when an API key is configured, else offline) | online | offline | disabled
    wandb_mode: str = key("auto", choices=("auto", "online", "offline", "disabled"))
    # seconds wandb.init may try to reach its server (wandb's own default is 90, retried past it); then
    # online is one error line, and auto logs offline with a note (verl/tracking/backends.py)
    wandb_init_timeout_s: float = key(20.0, gt=0)
    log_every: int = key(1, ge=1)
    val_samples: int = key(4, ge=0)  # held-out (prompt, greedy answer, reward) rows printed and logged per validation
    progress_bar: bool = True

    def validate(self, path: str) -> None:
        known = resolve_choices("verl.tracking.tracker:KNOWN_BACKENDS")
        for name in self.backends:
            if name not in known:
                raise ConfigError(f"{path}.backends: unknown backend '{name}'; choose from {', '.join(known)}"
                                  f"{did_you_mean(name, known)}")
