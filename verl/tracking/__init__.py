"""Experiment tracking: metric names, logging backends, health signals, plots and reports.

    from verl.tracking import Tracker, ProgressBar, system_metrics, short_metrics

Importing this package is light (no torch, no matplotlib); backends import what they need.
See docs/monitoring.md.
"""

from verl.tracking.health import HealthMonitor
from verl.tracking.metrics import SHORT_KEYS, short_metrics
from verl.tracking.progress import ProgressBar
from verl.tracking.system import GpuUtilSampler, compute_mfu, gpu_peak_flops, system_metrics
from verl.tracking.tracker import Tracker


def plot_runs(run_dirs, out_png, size=(14, 9), dpi=100):
    from verl.tracking.plot import plot_runs as _plot_runs

    return _plot_runs(run_dirs, out_png, size=size, dpi=dpi)


def write_report(run_dir, out_html=None):
    from verl.tracking.report import write_report as _write_report

    return _write_report(run_dir, out_html)


__all__ = [
    "Tracker",
    "HealthMonitor",
    "ProgressBar",
    "SHORT_KEYS",
    "short_metrics",
    "system_metrics",
    "GpuUtilSampler",
    "compute_mfu",
    "gpu_peak_flops",
    "plot_runs",
    "write_report",
]
