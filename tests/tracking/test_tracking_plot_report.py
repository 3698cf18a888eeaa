"""`verl plot` and `verl report` on synthetic run directories; the report renders in headless Chromium."""

import json
import os
import random
import re
import subprocess

import pytest

from verl.config import LoggingConfig
from verl.tracking import Tracker, plot_runs, write_report
from verl.tracking import plot as plot_mod
from verl.tracking import report as report_mod

CHROMIUM = "/usr/bin/chromium"
EVIL = "<script>alert('xss')</script><b>bold</b> & \"quoted\""


def make_run(path, seed=0, steps=30, val_every=10):
    rng = random.Random(seed)
    config = {"training": {"total_steps": steps}, "reward_fn": {"target": "<I love RL>"}}
    tracker = Tracker(LoggingConfig(backends=[]), str(path), config, printer=lambda line: None)
    for step in range(1, steps + 1):
        tracker.log(
            {
                "reward/mean": 0.1 + 0.02 * step + rng.uniform(-0.05, 0.05),
                "actor/kl": 0.002 * step,
                "actor/entropy": 2.5 - 0.01 * step,
                "response_length/mean": 20 + 0.3 * step,
                "perf/tokens_per_s": 5000 + rng.uniform(-300, 300),
                "timing_s/step": 1.0,
            },
            step,
        )
        if step % val_every == 0:
            tracker.log({"val/accuracy": 0.2 + 0.01 * step}, step)
            tracker.log_samples(step, [
                {"prompt": "What is 2+2?", "response": EVIL, "reward": 1.0},
                {"prompt": "Say hi", "response": "hi\nthere", "reward": 0.0},
            ])
    tracker.log({"actor/kl": 0.5}, steps)  # one health warning for the report
    tracker.close()
    return str(path)


def png_size(path):
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_plot_runs_png_size_and_overlay(tmp_path):
    runs = [make_run(tmp_path / "run_a", 0), make_run(tmp_path / "run_b", 1, steps=20)]
    out = plot_runs(runs, str(tmp_path / "dash.png"))
    assert png_size(out) == (1400, 900)
    out2 = plot_runs(runs[:1], str(tmp_path / "small" / "dash.png"), size=(8, 5), dpi=50)
    assert png_size(out2) == (400, 250)

    fig = plot_mod.dashboard_figure(runs)
    axes = fig.axes
    assert [ax.get_title() for ax in axes][:6] == [
        "Reward (mean)", "KL to reference", "Entropy", "Response length (mean tokens)",
        "Throughput (tokens/s)", "Validation (val/accuracy)",
    ]
    reward_lines = [line for line in axes[0].get_lines()]
    assert sorted(line.get_label() for line in reward_lines) == ["run_a", "run_b"]
    assert len(axes[5].get_lines()) == 2  # validation plotted for both runs


def test_agent_runs_get_a_tool_call_panel(tmp_path):
    run = tmp_path / "agent"
    run.mkdir()
    rows = [{"step": i, "reward/mean": 0.1 * i, "agent/trajectories_with_tool_call": 0.2 * i} for i in range(1, 5)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    fig = plot_mod.dashboard_figure([str(run)])
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 7 and visible[6].get_title() == "Trajectories with a tool call (share)"
    assert list(visible[6].get_lines()[0].get_ydata()) == [0.2, 0.4, 0.6000000000000001, 0.8]
    assert png_size(plot_runs([str(run)], str(tmp_path / "a.png"))) == (1400, 1350)  # three rows of panels


def test_distillation_runs_get_a_kl_to_teacher_panel(tmp_path):
    # A distillation run beside a plain one: the panel appears once any run logs the key, and
    # carries only that run's line (KL 1.6, 1.2, 0.8: the values as logged).
    distilled, plain = tmp_path / "distilled", tmp_path / "plain"
    distilled.mkdir(), plain.mkdir()
    (distilled / "metrics.jsonl").write_text("\n".join(
        json.dumps({"step": i, "reward/mean": 0.0, "distillation/kl_k3": kl}) for i, kl in [(1, 1.6), (2, 1.2), (3, 0.8)]))
    (plain / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}))
    fig = plot_mod.dashboard_figure([str(distilled), str(plain)])
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 7 and visible[6].get_title() == "KL to the teacher (distillation/kl_k3)"
    assert [(line.get_label(), list(line.get_ydata())) for line in visible[6].get_lines()] == [
        ("distilled", [1.6, 1.2, 0.8])]
    fig = plot_mod.dashboard_figure([str(plain)])
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 6  # no panel where no run distils


def test_plot_handles_missing_metrics_and_nulls(tmp_path):
    run = tmp_path / "sparse"
    run.mkdir()
    rows = [{"step": 1, "reward/mean": None}, {"step": 2, "reward": 0.5}, {"step": 3, "reward/mean": 0.7}]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{torn line")
    assert plot_mod.series(plot_mod.read_metrics(str(run)), "reward/mean") == ([2, 3], [0.5, 0.7])
    assert png_size(plot_runs([str(run)], str(tmp_path / "s.png"))) == (1400, 900)


def test_plot_cli(tmp_path, capsys):
    run = make_run(tmp_path / "run", 0, steps=5, val_every=5)
    assert plot_mod.main([run]) == 0
    assert png_size(os.path.join(run, "dashboard.png")) == (1400, 900)
    assert plot_mod.main([run, run, "--out", str(tmp_path / "both.png")]) == 0
    assert os.path.exists(tmp_path / "both.png")
    assert plot_mod.main([str(tmp_path / "missing")]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err


def test_run_labels_disambiguate():
    assert plot_mod.run_labels(["a/run", "b/run", "c/other"]) == ["a/run", "b/run", "other"]


def test_report_content_and_escaping(tmp_path):
    run = make_run(tmp_path / "run", 0)
    out = write_report(run, str(tmp_path / "report.html"))
    page = open(out, encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()  # the page has no script at all, samples included
    assert "&lt;script&gt;alert(&#x27;xss&#x27;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; &amp; &quot;quoted&quot;" in page
    assert "&lt;I love RL&gt;" in page  # config is escaped too
    assert re.search(r'src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', page)
    assert "http://" not in page and "https://" not in page  # self-contained
    assert "step 30 (2 samples" in page and "step 10 (2 samples" in page
    assert "algorithm.kl_coef" in page  # health warning
    assert "<td>reward/mean</td>" in page and "<td>val/accuracy</td>" in page
    final = report_mod.final_metrics(plot_mod.read_metrics(run))
    assert final["actor/kl"] == (30, 0.5) and final["val/accuracy"][0] == 30


def test_report_cli_default_path(tmp_path):
    run = make_run(tmp_path / "run", 0, steps=3, val_every=3)
    assert report_mod.main([run]) == 0
    assert os.path.exists(os.path.join(run, "report.html"))
    assert report_mod.main([str(tmp_path / "nope")]) == 2


def chromium(*args, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} not found: the report test needs Chromium. Install it with `apt-get install -y chromium`.")
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
        "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr", "--v=0", *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_errors(stderr):
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_console_error_capture_works(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); notDefined();</script></body></html>")
    proc = chromium("--dump-dom", bad.as_uri(), tmp_path=tmp_path)
    errors = console_errors(proc.stderr)
    assert any("boom" in e for e in errors) and any("Uncaught" in e for e in errors), proc.stderr[-2000:]


def test_report_renders_in_headless_chromium(tmp_path):
    from matplotlib.image import imread

    run = make_run(tmp_path / "run", 0)
    html_path = write_report(run, str(tmp_path / "report.html"))
    uri = "file://" + os.path.abspath(html_path)

    shot = tmp_path / "shot.png"
    proc = chromium(f"--screenshot={shot}", "--window-size=1400,2400", uri, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 20_000, proc.stderr[-2000:]
    pixels = imread(str(shot))
    assert pixels.shape[:2] == (2400, 1400)
    assert pixels[..., :3].std() > 0.05  # not a blank page
    assert console_errors(proc.stderr) == []

    proc = chromium("--dump-dom", uri, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "verl run: run" in dom and "Final metrics" in dom and "Sample generations" in dom
    assert "<script" not in dom.lower()  # the sample's script tag stayed text
    assert "&lt;script&gt;alert('xss')&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in dom
    assert "<b>bold</b>" not in dom
    assert 'src="data:image/png;base64,' in dom
    assert console_errors(proc.stderr) == []
