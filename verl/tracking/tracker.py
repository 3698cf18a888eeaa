"""Tracker: the one object the trainer logs through.

    tracker = Tracker(cfg.logging, run_dir, cfg.to_dict(), total_steps=cfg.training.total_steps)
    tracker.log({"reward/mean": 0.53, "actor/kl": 0.012}, step=12)
    tracker.log_samples(12, [{"prompt": p, "response": r, "reward": 0.5}])
    tracker.close()

At start it writes `run_dir/config.yaml` and `run_dir/run_info.json` (git revision, time,
host, versions). `metrics.jsonl` is always written, whatever `logging.backends` says, so
`verl plot` and `verl report` work on every run. Every logged step also goes through a
`HealthMonitor`; its warnings are printed once and logged as text under the key "health".
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import warnings
from typing import Any, Optional

import yaml

from verl.redact import redact_obj
from verl.tracking.backends import ConsoleBackend, JsonlBackend, TensorBoardBackend, WandbBackend
from verl.tracking.health import HealthMonitor
from verl.tracking.metrics import to_float

KNOWN_BACKENDS = ("console", "jsonl", "tensorboard", "wandb")


def git_revision(path: str) -> tuple[str, Optional[bool]]:
    """(commit hash, has uncommitted changes) of the git work tree holding `path`, or ('unknown', None)."""
    def git(*args: str) -> Optional[str]:
        try:
            out = subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    rev = git("rev-parse", "HEAD")
    if not rev:
        return "unknown", None
    status = git("status", "--porcelain", "--untracked-files=no")
    return rev, (bool(status) if status is not None else None)


def _plain(obj: Any) -> Any:
    """Config dict -> YAML/JSON-safe builtins (unknown objects become strings)."""
    return json.loads(json.dumps(obj, default=str))


class Tracker:
    def __init__(
        self,
        logging_cfg,
        run_dir: str,
        config_dict: dict,
        *,
        total_steps: Optional[int] = None,
        health: Optional[HealthMonitor] | bool = True,
        printer=None,
    ):
        """logging_cfg: a `LoggingConfig` (backends, project, run_name, wandb_mode, log_every).
        total_steps: shown as `step N/total` (default: config_dict['training']['total_steps']).
        health: True for a default `HealthMonitor`, a monitor of your own, or False for none.
        printer: callable(str) for console lines and warnings (default: tqdm.write).
        """
        self.cfg = logging_cfg
        self.run_dir = run_dir
        os.makedirs(run_dir, exist_ok=True)
        if total_steps is None:
            total_steps = (config_dict.get("training") or {}).get("total_steps") if config_dict else None
        self.total_steps = total_steps
        self.run_name = logging_cfg.run_name or os.path.basename(os.path.abspath(run_dir))
        self._printer = printer
        self._warned_non_numeric: set[str] = set()
        self._closed = False

        self._write_run_files(config_dict or {})

        names = list(dict.fromkeys(logging_cfg.backends))  # keep order, drop repeats (the section checked the names)
        self.backends: list = [JsonlBackend(run_dir)]  # always on
        if "console" in names:
            self.backends.append(ConsoleBackend(total_steps, logging_cfg.log_every, printer))
        if "tensorboard" in names:
            self.backends.append(TensorBoardBackend(run_dir))
        if "wandb" in names and logging_cfg.wandb_mode != "disabled":
            self.backends.append(
                WandbBackend(run_dir, logging_cfg.project, self.run_name, logging_cfg.wandb_mode,
                             redact_obj(_plain(config_dict or {})), logging_cfg.wandb_init_timeout_s)
            )

        if health is True:
            health = HealthMonitor()
        self.health: Optional[HealthMonitor] = health or None

    # -- run files ----------------------------------------------------------

    def _write_run_files(self, config_dict: dict) -> None:
        with open(os.path.join(self.run_dir, "config.yaml"), "w", encoding="utf-8") as fh:
            yaml.safe_dump(redact_obj(_plain(config_dict)), fh, sort_keys=False, allow_unicode=True)
        package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        rev, dirty = git_revision(package_dir)
        if rev == "unknown":
            rev, dirty = git_revision(os.getcwd())
        info = {
            "run_name": self.run_name,
            "project": self.cfg.project,
            "start_time": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "git_revision": rev,
            "git_dirty": dirty,
            "verl_version": _verl_version(),
            "python": platform.python_version(),
            "host": socket.gethostname(),
            "argv": list(sys.argv),
            "backends": list(self.cfg.backends),
        }
        with open(os.path.join(self.run_dir, "run_info.json"), "w", encoding="utf-8") as fh:
            json.dump(redact_obj(info), fh, indent=2)  # argv may hold a URL with a password

    # -- logging ------------------------------------------------------------

    def _numeric(self, metrics: dict) -> dict[str, float]:
        out = {}
        for key, value in metrics.items():
            number = to_float(value)
            if number is None:
                if key not in self._warned_non_numeric:
                    self._warned_non_numeric.add(key)
                    warnings.warn(f"Tracker.log: metric {key!r} is not a number ({type(value).__name__}); not logged")
                continue
            out[key] = number
        return out

    def log(self, metrics: dict[str, float], step: int) -> list[str]:
        """Log one step's scalars (NaN/Inf allowed; null in metrics.jsonl). Returns new health warnings."""
        numeric = self._numeric(metrics)
        for backend in self.backends:
            backend.log(numeric, step)
        new = self.health.check(numeric, step) if self.health is not None else []
        for message in new:
            self._say(f"WARNING [health] {message}")
            self.log_text("health", message, step, quiet=True)
        return new

    def log_samples(self, step: int, samples: list[dict]) -> None:
        """Sample generations, e.g. [{"prompt": ..., "response": ..., "reward": ...}]."""
        for backend in self.backends:
            backend.log_samples(step, list(samples))

    def log_text(self, key: str, text: str, step: int, *, quiet: bool = False) -> None:
        for backend in self.backends:
            if quiet and isinstance(backend, ConsoleBackend):
                continue
            backend.log_text(key, text, step)

    def _say(self, line: str) -> None:
        if self._printer is not None:
            self._printer(line)
        else:
            from tqdm import tqdm

            tqdm.write(line)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for backend in self.backends:
            backend.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _verl_version() -> str:
    try:
        from verl.version import __version__

        return __version__
    except ImportError:
        return "unknown"
