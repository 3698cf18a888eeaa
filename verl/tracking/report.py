"""`verl report RUN_DIR [--out FILE.html]`: one self-contained HTML page about a run.

The page holds the dashboard (PNG embedded as base64), health warnings, the final value
of every metric, the config, and the sample generations per step. It has no scripts and
loads nothing from the network; every text from the run is HTML-escaped.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import os
import sys
from collections import OrderedDict
from typing import Any, Optional

from verl.tracking.metrics import fmt
from verl.tracking.plot import dashboard_png_bytes, read_jsonl, read_metrics

MAX_SAMPLE_STEPS = 50  # newest steps shown; older ones are counted, not rendered

CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto; max-width: 1480px;
       color: #1f2328; padding: 0 16px; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 32px; }
.meta { color: #57606a; font-size: 14px; }
img.dashboard { width: 100%; max-width: 1400px; border: 1px solid #d0d7de; }
table { border-collapse: collapse; font-size: 14px; margin: 8px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-family: ui-monospace, monospace; }
.turn { border-left: 3px solid #8c959f; padding: 2px 6px; margin: 2px 0; }
.turn-assistant { border-color: #0969da; } .turn-tool { border-color: #1a7f37; background: #f6f8fa; }
.turn-environment { border-color: #9a6700; background: #fff8c5; }
td.text { white-space: pre-wrap; word-break: break-word; max-width: 640px; font-family: ui-monospace, monospace; }
pre { background: #f6f8fa; padding: 12px; overflow-x: auto; font-size: 13px; }
.warn { background: #fff8c5; border: 1px solid #d4a72c; padding: 8px 12px; margin: 6px 0; border-radius: 4px; }
details { margin: 6px 0; } summary { cursor: pointer; font-weight: 600; }
"""


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def final_metrics(records: list[dict]) -> "OrderedDict[str, tuple[int, float]]":
    """Last finite value of every metric and the step it was logged at, sorted by name."""
    last: dict[str, tuple[int, float]] = {}
    for rec in records:
        for key, value in rec.items():
            if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                last[key] = (rec.get("step"), float(value))
    return OrderedDict(sorted(last.items()))


def _cell(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num">{e(fmt(float(value)))}</td>'
    if value is None:
        return '<td class="num">-</td>'
    if isinstance(value, list) and value and all(isinstance(t, dict) and "role" in t for t in value):
        return f'<td class="text">{_turns_html(value)}</td>'
    return f'<td class="text">{e(value)}</td>'


def _turns_html(turns: list[dict]) -> str:
    """A multi-turn trajectory turn by turn: the model's turns, tool calls' results (with the tool's
    name, failures marked) and environment observations, each in its own block."""
    out = []
    for t in turns:
        role = t.get("role", "?")
        label = role if role != "tool" else f"tool {t.get('name') or ''}".strip()
        if t.get("ok") is False:
            label += " (error)"
        if "reward" in t:
            label += f" reward {fmt(t['reward'])}"
        out.append(f'<div class="turn turn-{e(role)}"><b>{e(label)}</b>\n{e(t.get("text", ""))}</div>')
    return "".join(out)


def _samples_html(samples: list[dict]) -> str:
    by_step: "OrderedDict[Any, list[dict]]" = OrderedDict()
    for row in samples:
        by_step.setdefault(row.get("step"), []).append(row)
    if not by_step:
        return "<p>No sample generations were logged (Tracker.log_samples).</p>"
    steps = list(by_step)
    shown = steps[-MAX_SAMPLE_STEPS:]
    parts = []
    if len(steps) > len(shown):
        parts.append(f"<p>Showing the last {len(shown)} of {len(steps)} logged steps (all are in samples.jsonl).</p>")
    for i, step in enumerate(reversed(shown)):  # newest first, open
        rows = by_step[step]
        columns: list[str] = []
        for row in rows:
            columns += [k for k in row if k != "step" and k not in columns]
        rewards = [r["reward"] for r in rows if isinstance(r.get("reward"), (int, float))]
        mean = f", mean reward {fmt(sum(rewards) / len(rewards))}" if rewards else ""
        head = "".join(f"<th>{e(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(_cell(r.get(c)) for c in columns) + "</tr>" for r in rows)
        parts.append(
            f'<details{" open" if i == 0 else ""}><summary>step {e(step)} ({len(rows)} samples{e(mean)})</summary>'
            f"<table><tr>{head}</tr>{body}</table></details>"
        )
    return "\n".join(parts)


def write_report(run_dir: str, out_html: Optional[str] = None) -> str:
    """Write the HTML report of `run_dir` (default `run_dir/report.html`); returns its path."""
    out_html = out_html or os.path.join(run_dir, "report.html")
    records = read_metrics(run_dir)
    info_path = os.path.join(run_dir, "run_info.json")
    info = json.load(open(info_path, encoding="utf-8")) if os.path.exists(info_path) else {}
    config_path = os.path.join(run_dir, "config.yaml")
    config_text = open(config_path, encoding="utf-8").read() if os.path.exists(config_path) else "(no config.yaml)"
    samples = read_jsonl(os.path.join(run_dir, "samples.jsonl"))
    health = [t for t in read_jsonl(os.path.join(run_dir, "text.jsonl")) if t.get("key") == "health"]

    name = info.get("run_name") or os.path.basename(os.path.abspath(run_dir))
    steps = [r["step"] for r in records if isinstance(r.get("step"), int)]
    meta = " · ".join(
        e(x)
        for x in (
            f"project {info.get('project', '?')}",
            f"started {info.get('start_time', '?')}",
            f"git {info.get('git_revision', 'unknown')}" + (" (dirty)" if info.get("git_dirty") else ""),
            f"steps logged {len(set(steps))}" + (f", last step {max(steps)}" if steps else ""),
        )
    )
    png = base64.b64encode(dashboard_png_bytes([run_dir])).decode("ascii")
    warnings_html = "".join(f'<div class="warn">{e(w.get("text", ""))}</div>' for w in health) or "<p>No health warnings.</p>"
    metric_rows = "".join(
        f'<tr><td>{e(k)}</td><td class="num">{e(fmt(v))}</td><td class="num">{e(s)}</td></tr>'
        for k, (s, v) in final_metrics(records).items()
    )
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>verl run report: {e(name)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>verl run: {e(name)}</h1>
<p class="meta">{meta}</p>
<h2>Health</h2>
{warnings_html}
<h2>Dashboard</h2>
<img class="dashboard" alt="dashboard of {e(name)}" src="data:image/png;base64,{png}">
<h2>Final metrics</h2>
<table><tr><th>metric</th><th>value</th><th>step</th></tr>{metric_rows}</table>
<h2>Sample generations</h2>
{_samples_html(samples)}
<h2>Config</h2>
<pre>{e(config_text)}</pre>
</body>
</html>
"""
    os.makedirs(os.path.dirname(os.path.abspath(out_html)), exist_ok=True)
    with open(out_html, "w", encoding="utf-8") as fh:
        fh.write(page)
    return out_html


DESCRIPTION = "Write a self-contained HTML report of a verl run (curves, samples, baseline answers)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(parser, "run_dir", metavar="RUN_DIR", help="the run's folder (checkpoint.save_dir)")
    add_flag(parser, "--out", default=None, help="HTML path (default: RUN_DIR/report.html)")


def run(args: argparse.Namespace) -> int:
    try:
        out = write_report(args.run_dir, args.out)
    except FileNotFoundError as exc:
        print(f"verl report: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="verl report", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
