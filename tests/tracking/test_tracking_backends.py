"""Tracker and its backends: jsonl, console, TensorBoard, WandB (offline), run files."""

import json
import math
import os
import sys

import pytest
import yaml

from verl.config import LoggingConfig
from verl.tracking import SHORT_KEYS, Tracker, short_metrics
from verl.tracking.backends import ConsoleBackend

CONFIG = {"training": {"total_steps": 3, "lr": 1e-5}, "model": {"name": "tiny:gpt2"}}


def metrics_at(step):
    return {
        "reward/mean": 0.1 * step,
        "actor/kl": 0.01 * step,
        "actor/entropy": 2.5 - 0.1 * step,
        "response_length/mean": 18.0 + step,
        "timing_s/step": 1.5,
    }


def read_lines(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def test_jsonl_run_files_and_non_finite(tmp_path):
    lines = []
    cfg = LoggingConfig(backends=["console"])
    with Tracker(cfg, str(tmp_path), CONFIG, printer=lines.append) as tracker:
        for step in (1, 2):
            tracker.log(metrics_at(step), step)
        tracker.log({"reward/mean": float("nan"), "actor/kl": float("inf"), "actor/entropy": 2.0}, 3)
        tracker.log_samples(3, [{"prompt": "p", "response": "r", "reward": 0.5}, {"prompt": "q", "response": "s", "reward": float("nan")}])
        tracker.log_text("baseline", "before training", 0)

    rows = read_lines(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[1]["reward/mean"] == pytest.approx(0.2)
    assert rows[2]["reward/mean"] is None and rows[2]["actor/kl"] is None  # non-finite -> null
    assert rows[2]["actor/entropy"] == 2.0

    samples = read_lines(tmp_path / "samples.jsonl")
    assert samples[0] == {"step": 3, "prompt": "p", "response": "r", "reward": 0.5}
    assert samples[1]["reward"] is None
    assert read_lines(tmp_path / "text.jsonl")[0] == {"step": 0, "key": "baseline", "text": "before training"}

    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == CONFIG
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert isinstance(info["git_revision"], str) and info["git_revision"]
    assert info["run_name"] == tmp_path.name and "start_time" in info

    # console: one compact line per step, total from the config
    assert lines[0] == "step 1/3 | reward 0.1 | kl 0.01 | entropy 2.4 | resp_len 19 | 1.5s"
    assert any(line.startswith("[baseline @ step 0]") for line in lines)


def test_git_revision_unknown_outside_repo(tmp_path, monkeypatch):
    from verl.tracking import tracker as tracker_mod

    assert tracker_mod.git_revision(str(tmp_path)) == ("unknown", None)


def test_console_format_and_log_every():
    printed = []
    console = ConsoleBackend(total_steps=100, log_every=5, printer=printed.append)
    line = console.format_line(
        {"reward/mean": 0.5321, "actor/kl": 0.0121, "actor/entropy": 2.314, "response_length/mean": 18.24, "perf/tokens_per_s": 12345.6},
        12,
        3.14,
    )
    assert line == "step 12/100 | reward 0.532 | kl 0.0121 | entropy 2.31 | resp_len 18.2 | 12346 tok/s | 3.1s"
    for step in range(1, 11):
        console.log({"reward/mean": 1.0}, step)
    assert [p.split(" |")[0] for p in printed] == ["step 5/100", "step 10/100"]


def test_non_numeric_metric_warns_once(tmp_path):
    tracker = Tracker(LoggingConfig(backends=[]), str(tmp_path), {}, health=False)
    with pytest.warns(UserWarning, match="not a number"):
        tracker.log({"reward/mean": 1.0, "note": "hello"}, 1)
    tracker.log({"reward/mean": 1.0, "note": "hello"}, 2)  # no second warning (would fail under -W error)
    tracker.close()
    assert "note" not in read_lines(tmp_path / "metrics.jsonl")[0]


def test_unknown_backend_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown backend"):
        Tracker(LoggingConfig(backends=["tensorbord"]), str(tmp_path), {})


def test_short_metrics():
    canonical = {"reward/mean": 0.5, "actor/kl": 0.02, "actor/entropy": 2.0, "actor/pg_loss": -0.1,
                 "critic/vf_loss": 0.3, "response_length/mean": 17.0, "system/gpu_utilization": 88.0, "timing_s/step": 2.0}
    short = short_metrics(canonical)
    assert short == {"reward": 0.5, "kl": 0.02, "kl_divergence": 0.02, "entropy": 2.0, "pg_loss": -0.1,
                     "vf_loss": 0.3, "response_length": 17.0, "gpu_utilization": 88.0}
    assert short_metrics({"reward/mean": 1.0}) == {"reward": 1.0}
    assert set(SHORT_KEYS) >= {"reward", "kl", "kl_divergence", "entropy", "gpu_utilization"}


def test_tensorboard_event_files(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(LoggingConfig(backends=["tensorboard"]), str(tmp_path), CONFIG)
    for step in (1, 2, 3):
        tracker.log(metrics_at(step), step)
    tracker.log({"reward/mean": float("nan")}, 4)
    tracker.log_samples(3, [{"prompt": "2+2=", "response": "4 | four", "reward": 1.0}])
    tracker.log_text("baseline", "hello world", 3)
    tracker.close()

    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert "reward/mean" in acc.Tags()["scalars"] and "actor/kl" in acc.Tags()["scalars"]
    events = acc.Scalars("reward/mean")
    assert [ev.step for ev in events] == [1, 2, 3, 4]
    assert [ev.value for ev in events[:3]] == pytest.approx([0.1, 0.2, 0.3])
    assert math.isnan(events[3].value)
    assert [ev.value for ev in acc.Scalars("actor/kl")] == pytest.approx([0.01, 0.02, 0.03])
    text_tags = acc.Tags()["tensors"]
    assert any(t.startswith("samples") for t in text_tags) and any(t.startswith("baseline") for t in text_tags)
    sample_tag = next(t for t in text_tags if t.startswith("samples"))
    table = acc.Tensors(sample_tag)[0].tensor_proto.string_val[0].decode()
    assert "2+2=" in table and "4 \\| four" in table


def test_wandb_offline_run_directory(tmp_path, monkeypatch):
    import wandb  # noqa: F401  (an optional extra of verl, part of the test extra)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = LoggingConfig(backends=["wandb"], wandb_mode="offline", project="verl-test", run_name="unit")
    run_dir = tmp_path / "run"
    tracker = Tracker(cfg, str(run_dir), CONFIG)
    for step in (1, 2):
        tracker.log(metrics_at(step), step)
    tracker.log_samples(2, [{"prompt": "a", "response": "b", "reward": 0.0}])
    tracker.log_text("baseline", "text", 2)
    tracker.close()

    offline = [d for d in os.listdir(run_dir / "wandb") if d.startswith("offline-run-")]
    assert len(offline) == 1, os.listdir(run_dir / "wandb")
    files = os.listdir(run_dir / "wandb" / offline[0])
    assert any(f.endswith(".wandb") for f in files), files
    assert (run_dir / "metrics.jsonl").exists()  # jsonl stays on next to wandb


def test_wandb_missing_gives_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` raise ImportError
    with pytest.raises(RuntimeError) as info:
        Tracker(LoggingConfig(backends=["wandb"], wandb_mode="offline"), str(tmp_path), {})
    message = str(info.value)
    assert "\n" not in message and "pip install" in message and "wandb" in message


def test_wandb_disabled_mode_skips_backend(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    tracker = Tracker(LoggingConfig(backends=["wandb"], wandb_mode="disabled"), str(tmp_path), {})
    tracker.log({"reward/mean": 1.0}, 1)
    tracker.close()
    assert not (tmp_path / "wandb").exists()


def test_wandb_without_a_reachable_server(tmp_path, monkeypatch, capsys):
    """An API key but no server (here: nothing listens on the base URL): wandb.init gives up after
    logging.wandb_init_timeout_s (wandb's own default retries for 90 s and more). wandb_mode online:
    one line naming the keys, a ConfigError (exit 2); auto: the run logs offline, said in one line."""
    import time

    import wandb  # noqa: F401
    from verl.errors import ConfigError

    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:
        Tracker(LoggingConfig(backends=["wandb"], wandb_mode="online", wandb_init_timeout_s=1), str(tmp_path / "a"), {})
    assert time.monotonic() - started < 60  # 1 s of init timeout plus wandb's own start and shutdown
    message = str(err.value)
    assert message.startswith("logging.wandb_mode: online, but wandb could not reach its server within "
                              "logging.wandb_init_timeout_s=1 s (CommError: ") and "\n" not in message
    assert "logging.wandb_mode=offline" in message
    tracker = Tracker(LoggingConfig(backends=["wandb"], wandb_mode="auto", wandb_init_timeout_s=1),
                      str(tmp_path / "b"), {})
    tracker.log(metrics_at(1), 1)
    tracker.close()
    assert "logging offline to" in capsys.readouterr().err
    assert any(d.startswith("offline-run-") for d in os.listdir(tmp_path / "b" / "wandb"))
