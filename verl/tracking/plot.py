"""`verl plot RUN_DIR [RUN_DIR ...] [--out FILE.png]`: a dashboard of one or more runs.

Reads each run's `metrics.jsonl` and draws reward, KL, entropy, response length,
throughput and validation accuracy (and, where a run logs them, tool calls and the KL to a
distillation teacher), with the runs overlaid (legend = run directory name).
Uses matplotlib's Agg canvas directly, so it never touches the caller's pyplot backend.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
from typing import Optional

from verl.tracking.metrics import lookup

PANELS = (  # (title, canonical key)
    ("Reward (mean)", "reward/mean"),
    ("KL to reference", "actor/kl"),
    ("Entropy", "actor/entropy"),
    ("Response length (mean tokens)", "response_length/mean"),
    ("Throughput (tokens/s)", "perf/tokens_per_s"),
)
# Panels added where a run logs them: runs with tools (docs/agents.md), on-policy distillation
# (docs/algorithms.md, "On-policy distillation": the student's per-token KL to its teacher, the figure that must fall).
OPTIONAL_PANELS = (
    ("Trajectories with a tool call (share)", "agent/trajectories_with_tool_call"),
    ("KL to the teacher (distillation/kl_k3)", "distillation/kl_k3"),
)


def read_jsonl(path: str) -> list[dict]:
    """All JSON objects in a .jsonl file ([] if missing); a torn last line (crashed run) or a
    line that is not an object is skipped, and so is a line with bytes that are not UTF-8."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def read_metrics(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl (is this a verl run directory?)")
    return read_jsonl(path)


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` (or its short alias); null/non-finite values are dropped."""
    steps, values = [], []
    for rec in records:
        value = lookup(rec, key)
        if value is not None and math.isfinite(value) and "step" in rec:
            steps.append(rec["step"])
            values.append(value)
    return steps, values


def pick_val_key(records_per_run: list[list[dict]]) -> Optional[str]:
    """The validation metric to plot: val/accuracy, else a val/*acc* key, else val/reward/mean, else any val/ key."""
    keys = sorted({k for records in records_per_run for rec in records for k in rec if k.startswith("val/")})
    if not keys:
        return None
    for choice in (["val/accuracy"], [k for k in keys if "acc" in k], ["val/reward/mean"], keys):
        for key in choice:
            if key in keys:
                return key
    return None


def run_labels(run_dirs: list[str]) -> list[str]:
    """Directory names, with the parent added where two runs share a name."""
    names = [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    return [
        os.path.join(os.path.basename(os.path.dirname(os.path.abspath(d))), n) if names.count(n) > 1 else n
        for d, n in zip(run_dirs, names)
    ]


def dashboard_figure(run_dirs: list[str], size=(14, 9), dpi=100):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records_per_run = [read_metrics(d) for d in run_dirs]
    labels = run_labels(run_dirs)
    val_key = pick_val_key(records_per_run)
    panels = list(PANELS) + [(f"Validation ({val_key})" if val_key else "Validation", val_key)]
    panels += [(title, key) for title, key in OPTIONAL_PANELS
               if any(key in rec for records in records_per_run for rec in records)]
    rows = math.ceil(len(panels) / 3)

    fig = Figure(figsize=(size[0], size[1] * rows / 2), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for ax, (title, key) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        drawn = False
        for records, label in zip(records_per_run, labels):
            steps, values = series(records, key) if key else ([], [])
            if steps:
                ax.plot(steps, values, label=label, linewidth=1.5, marker="o" if len(steps) < 20 else None, markersize=3)
                drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
        elif key == "actor/kl":
            ax.axhline(0.1, color="red", linestyle="--", linewidth=1, label="0.1 (raise kl_coef)")
    handles, legend_labels = [], []
    for ax in axes.flat:  # one legend for the figure, each label once
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in legend_labels:
                handles.append(h)
                legend_labels.append(lab)
    if handles:
        fig.legend(handles, legend_labels, loc="upper center", ncol=min(len(handles), 6), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def plot_runs(run_dirs: list[str], out_png: str, size=(14, 9), dpi=100) -> str:
    """Write the dashboard of `run_dirs` to `out_png` (size[0]*dpi x size[1]*dpi pixels); returns the path."""
    if not run_dirs:
        raise ValueError("plot_runs: give at least one run directory")
    fig = dashboard_figure(run_dirs, size, dpi)
    out_dir = os.path.dirname(os.path.abspath(out_png))
    os.makedirs(out_dir, exist_ok=True)
    fig.savefig(out_png, dpi=dpi, format="png")
    return out_png


def dashboard_png_bytes(run_dirs: list[str], size=(14, 9), dpi=100) -> bytes:
    buf = io.BytesIO()
    dashboard_figure(run_dirs, size, dpi).savefig(buf, dpi=dpi, format="png")
    return buf.getvalue()


DESCRIPTION = "Plot a PNG dashboard (reward, KL, entropy, lengths, timing) of one or more verl runs."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(parser, "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (each holds metrics.jsonl)")
    add_flag(parser, "--out", default=None,
             help="PNG path (default: RUN_DIR/dashboard.png for one run, ./dashboard.png for several)")


def run(args: argparse.Namespace) -> int:
    out = args.out or (os.path.join(args.run_dirs[0], "dashboard.png") if len(args.run_dirs) == 1 else "dashboard.png")
    try:
        plot_runs(args.run_dirs, out)
    except FileNotFoundError as exc:
        print(f"verl plot: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="verl plot", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
