"""Where metrics go: one small class per backend, all with the same four methods.

    log(metrics, step)        metrics: {canonical name: float}; non-finite values allowed
    log_samples(step, rows)   rows: [{"prompt": ..., "response": ..., "reward": ...}, ...]
    log_text(key, text, step)
    close()

`Tracker` (tracker.py) fans each call out to the backends the config names. Every backend
passes what it writes through `verl.redact`: configured secrets (API keys) never reach a
console line, a log file or a dashboard.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, Optional

from verl.errors import ConfigError
from verl.redact import redact, redact_obj
from verl.tracking.metrics import fmt, json_safe, lookup


class ConsoleBackend:
    """One readable line per logged step, e.g.
    `step 12/100 | reward 0.532 | kl 0.012 | entropy 2.31 | resp_len 18.2 | 3.1s`.

    Printed through `tqdm.write` so an active progress bar is not broken up.
    Only every `log_every`-th step (and the last) is printed; file backends keep all steps.
    """

    FIELDS = (  # (label, canonical key)
        ("reward", "reward/mean"),
        ("kl", "actor/kl"),
        ("entropy", "actor/entropy"),
        ("resp_len", "response_length/mean"),
    )

    def __init__(self, total_steps: Optional[int] = None, log_every: int = 1, printer=None):
        self.total_steps = total_steps
        self.log_every = max(1, int(log_every))
        self._printer = printer
        self._last_time: Optional[float] = None
        self._last_step: Optional[int] = None

    def _print(self, line: str) -> None:
        line = redact(line)
        if self._printer is not None:
            self._printer(line)
            return
        from tqdm import tqdm

        tqdm.write(line)

    def format_line(self, metrics: dict, step: int, seconds: Optional[float]) -> str:
        total = f"/{self.total_steps}" if self.total_steps else ""
        parts = [f"step {step}{total}"]
        for label, key in self.FIELDS:
            value = lookup(metrics, key)
            if value is not None:
                parts.append(f"{label} {fmt(value)}" + (self._components(metrics) if key == "reward/mean" else ""))
        val_keys = sorted(k for k in metrics if k.startswith("val/"))
        for key in val_keys[:2]:  # validation steps: show the first two val metrics
            parts.append(f"{key} {fmt(metrics[key])}")
        tps = lookup(metrics, "perf/tokens_per_s")
        if tps is not None:
            parts.append(f"{fmt(tps)} tok/s")
        if seconds is not None:
            parts.append(f"{seconds:.1f}s")
        return " | ".join(parts)

    # reward/<name> keys that are not a reward component's mean (verl/rewards/manager.py names those)
    NOT_COMPONENTS = {"mean", "max", "min", "errors", "overlong_penalty"}

    @classmethod
    def _components(cls, metrics: dict) -> str:
        """' (correct 0.31, length 0.9)': each reward component's mean when the reward has several (its
        weighted sum is the reward shown), so the line says which part moves; '' for a single one."""
        names = [k.split("/", 1)[1] for k in metrics if k.startswith("reward/") and k.count("/") == 1
                 and k.split("/", 1)[1] not in cls.NOT_COMPONENTS]
        if len(names) < 2:
            return ""
        return " (" + ", ".join(f"{name} {fmt(metrics['reward/' + name])}" for name in names) + ")"

    def log(self, metrics: dict, step: int) -> None:
        now = time.monotonic()
        seconds = lookup(metrics, "timing_s/step")
        if seconds is None and self._last_time is not None and self._last_step is not None and step > self._last_step:
            seconds = (now - self._last_time) / (step - self._last_step)  # wall time per step
        self._last_time, self._last_step = now, step
        is_last = self.total_steps is not None and step >= self.total_steps
        if step % self.log_every == 0 or is_last or any(k.startswith("val/") for k in metrics):
            self._print(self.format_line(metrics, step, seconds))

    def log_samples(self, step: int, samples: list[dict]) -> None:
        """Held-out answers (kind "val": a few per validation) are printed, one line each, so
        the run's own output shows what the model answers before and after training; training
        samples go to files and dashboards only."""
        for row in samples:
            if row.get("kind") != "val":
                continue
            reward = row.get("reward")
            score = f" (reward {fmt(reward)})" if isinstance(reward, (int, float)) else ""
            prompt = str(row.get("prompt", ""))
            if len(prompt) > 80:  # a chat-templated prompt: its end holds the question
                prompt = "..." + prompt[-77:]
            self._print(f"[held-out @ step {step}] {prompt!r} -> {row.get('response', '')!r}{score}")

    def log_text(self, key: str, text: str, step: int) -> None:
        self._print(f"[{key} @ step {step}] {text}")

    def close(self) -> None:
        pass


class JsonlBackend:
    """`metrics.jsonl`: one object per `log` call, {"step": N, <metric>: value|null, ...}.
    `samples.jsonl`: one object per sample, {"step": N, "prompt": ..., "response": ..., ...}.
    `text.jsonl`: {"step": N, "key": ..., "text": ...}. Files are flushed after each write
    so a crashed run keeps everything logged so far.
    """

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._metrics = open(os.path.join(run_dir, "metrics.jsonl"), "a", encoding="utf-8")
        self._samples = None
        self._text = None

    @staticmethod
    def _write(fh, obj: dict) -> None:
        fh.write(redact(json.dumps(redact_obj(obj), ensure_ascii=False, allow_nan=False, default=str)) + "\n")
        fh.flush()

    def log(self, metrics: dict, step: int) -> None:
        self._write(self._metrics, {"step": step, **{k: json_safe(v) for k, v in metrics.items()}})

    def log_samples(self, step: int, samples: list[dict]) -> None:
        if self._samples is None:
            self._samples = open(os.path.join(self.run_dir, "samples.jsonl"), "a", encoding="utf-8")
        for sample in samples:
            row = {k: (json_safe(v) if isinstance(v, float) else v) for k, v in sample.items()}
            self._write(self._samples, {"step": step, **row})

    def log_text(self, key: str, text: str, step: int) -> None:
        if self._text is None:
            self._text = open(os.path.join(self.run_dir, "text.jsonl"), "a", encoding="utf-8")
        self._write(self._text, {"step": step, "key": key, "text": text})

    def close(self) -> None:
        for fh in (self._metrics, self._samples, self._text):
            if fh is not None:
                fh.close()


def _sample_columns(samples: list[dict]) -> list[str]:
    columns: list[str] = []
    for sample in samples:
        columns += [k for k in sample if k not in columns]
    return columns


class TensorBoardBackend:
    """Scalars under their canonical names in `run_dir/tensorboard`; samples as a markdown table."""

    def __init__(self, run_dir: str):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=os.path.join(run_dir, "tensorboard"))

    def log(self, metrics: dict, step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)  # NaN/Inf are stored as-is

    def log_samples(self, step: int, samples: list[dict]) -> None:
        if not samples:
            return
        columns = _sample_columns(samples)

        def cell(v: Any) -> str:  # one markdown table cell: no newlines or bare pipes
            return redact(str(v)).replace("|", "\\|").replace("\n", "<br>")

        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(s.get(c, "")) for c in columns) + " |" for s in samples]
        self.writer.add_text("samples", "\n".join(lines), global_step=step)

    def log_text(self, key: str, text: str, step: int) -> None:
        self.writer.add_text(redact(key), redact(text), global_step=step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


WANDB_MODES = ("auto", "online", "offline", "disabled")
_said_offline = False  # the "logging offline" line is printed once per process


def wandb_has_api_key(wandb) -> bool:
    """Whether wandb finds credentials (WANDB_API_KEY, a netrc entry, its settings) without
    prompting and without the network (wandb's own check: `wandb.login(prompt=False, verify=False)`)."""
    try:
        return bool(wandb.login(prompt=False, verify=False))
    except Exception:  # noqa: BLE001 - malformed credentials count as none; online mode would fail on them
        return False


def resolve_wandb_mode(mode: str, wandb, run_dir: str) -> Optional[str]:
    """The mode for wandb.init. auto: WANDB_MODE when the environment sets it (None: wandb reads it),
    online when an API key is configured, else offline with one line saying where the run goes."""
    global _said_offline
    if mode != "auto":
        return mode
    if os.environ.get("WANDB_MODE"):
        return None
    if wandb_has_api_key(wandb):
        return "online"
    if not _said_offline:
        _said_offline = True
        folder = os.path.join(run_dir, "wandb")
        print(f"wandb: no API key configured (WANDB_API_KEY or `wandb login`); logging offline to {folder}; "
              f"upload it later with `wandb sync {folder}/offline-run-*`", file=sys.stderr, flush=True)
    return "offline"


def one_line_of(exc: BaseException, limit: int = 200) -> str:
    """An exception as 'Type: its first line', redacted and shortened (wandb's messages span lines)."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    text = redact(f"{type(exc).__name__}: {first}")
    return text if len(text) <= limit else text[:limit - 3] + "..."


class WandbBackend:
    """A WandB run in `run_dir/wandb`. mode: auto (online when wandb finds an API key, else
    offline, said once), online, offline (local files only, no network; `wandb sync
    run_dir/wandb/offline-run-*` uploads them later)."""

    def __init__(self, run_dir: str, project: str, name: str, mode: str, config: dict, init_timeout_s: float = 20.0):
        try:
            import wandb
        except ImportError:
            from verl.install_hint import pip_extra

            raise RuntimeError(
                "logging.backends includes 'wandb' but the wandb package is not installed: "
                f"{pip_extra('wandb')} (or remove 'wandb' from logging.backends)"
            ) from None
        self.wandb = wandb
        self.mode = resolve_wandb_mode(mode, wandb, run_dir)
        kwargs = dict(project=project, name=name, dir=run_dir, config=config)
        try:
            self.run = wandb.init(mode=self.mode, settings=wandb.Settings(init_timeout=init_timeout_s), **kwargs)
        except Exception as exc:  # noqa: BLE001 - wandb's CommError/UsageError: no server within the timeout
            if self.mode == "offline":
                raise
            why = one_line_of(exc)
            if mode != "auto":
                raise ConfigError(f"logging.wandb_mode: {mode}, but wandb could not reach its server within "
                                  f"logging.wandb_init_timeout_s={init_timeout_s:g} s ({why}); log offline with "
                                  "logging.wandb_mode=offline (upload later with `wandb sync`) or remove wandb from "
                                  "logging.backends") from None
            folder = os.path.join(run_dir, "wandb")
            print(f"wandb: an API key is configured but its server did not answer within "
                  f"logging.wandb_init_timeout_s={init_timeout_s:g} s ({why}); logging offline to {folder} instead; "
                  f"upload it later with `wandb sync {folder}/offline-run-*`", file=sys.stderr, flush=True)
            self.mode = "offline"
            self.run = wandb.init(mode="offline", **kwargs)

    def log(self, metrics: dict, step: int) -> None:
        self.run.log(redact_obj(dict(metrics)), step=step)

    def log_samples(self, step: int, samples: list[dict]) -> None:
        if not samples:
            return
        columns = _sample_columns(samples)
        rows = [[_wandb_cell(s.get(c)) for c in columns] for s in samples]
        self.run.log({"samples": self.wandb.Table(columns=["step"] + columns, data=[[step] + r for r in rows])}, step=step)

    def log_text(self, key: str, text: str, step: int) -> None:
        self.run.log({redact(key): self.wandb.Table(columns=["step", "text"], data=[[step, redact(text)]])}, step=step)

    def close(self) -> None:
        self.run.finish()


def _wandb_cell(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return redact(str(value))
