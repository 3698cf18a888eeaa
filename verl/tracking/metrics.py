"""Metric names: the canonical keys the trainer emits, and the seed's short aliases.

Canonical keys are `<group>/<name>` so TensorBoard and WandB group them into panels:

    reward/mean, reward/<fn>            mean reward per step, and per reward function
    actor/kl, actor/entropy             KL to the reference policy, token entropy of the policy
    actor/pg_loss, actor/clipfrac, actor/grad_norm
    critic/vf_loss, critic/explained_var
    response_length/mean|max|clip_ratio clip_ratio = share of responses that hit max_new_tokens
    timing_s/<stage>                    seconds per stage (rollout, reward, ..., step)
    perf/tokens_per_s, perf/mfu
    system/gpu_utilization (percent), system/gpu_memory_gb, system/gpu_memory_frac,
    system/cpu_memory_gb
    val/<name>                          validation metrics

`short_metrics` gives the flat names the seed's tutorial uses (`metrics['reward']`,
`metrics['kl']`, `metrics['kl_divergence']`, ...), which `trainer.step()` also returns.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

# short key (seed section 3.3 / 5.4) -> canonical key
SHORT_KEYS: dict[str, str] = {
    "reward": "reward/mean",
    "kl": "actor/kl",
    "kl_divergence": "actor/kl",
    "entropy": "actor/entropy",
    "pg_loss": "actor/pg_loss",
    "vf_loss": "critic/vf_loss",
    "response_length": "response_length/mean",
    "gpu_utilization": "system/gpu_utilization",
}


def short_metrics(canonical: Mapping[str, Any]) -> dict[str, Any]:
    """The seed's short keys for the canonical metrics present (absent ones are left out)."""
    return {short: canonical[key] for short, key in SHORT_KEYS.items() if key in canonical}


def lookup(metrics: Mapping[str, Any], canonical_key: str) -> Optional[float]:
    """`metrics[canonical_key]` as a float, falling back to its short alias; None if absent."""
    value = metrics.get(canonical_key)
    if value is None:
        for short, key in SHORT_KEYS.items():
            if key == canonical_key and short in metrics:
                value = metrics[short]
                break
    return to_float(value)


def to_float(value: Any) -> Optional[float]:
    """A Python float from a number, 0-d tensor or numpy scalar; None for anything else."""
    if value is None or isinstance(value, str):
        return None
    if hasattr(value, "item"):  # torch / numpy scalars
        try:
            value = value.item()
        except (ValueError, RuntimeError):  # more than one element
            return None
    if isinstance(value, (bool, int, float)):
        return float(value)
    return None


def json_safe(value: Optional[float]) -> Optional[float]:
    """NaN/Inf become None (JSON null): the step is still recorded, the value marked missing."""
    return value if value is not None and math.isfinite(value) else None


def fmt(value: Optional[float]) -> str:
    """Compact number for the console: 3 significant digits, no exponent below 1e6."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:.0f}" if abs(value) < 1e6 else f"{value:.3g}"
    if value != 0 and abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3g}"
