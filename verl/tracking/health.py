"""Health signals: turn the seed's "watch these metrics" advice (section 5.4) into warnings.

Each kind of warning fires at most once per run and names the config key to change:

| kind             | fires when                                                   | suggested change                      |
|------------------|--------------------------------------------------------------|---------------------------------------|
| kl_high          | actor/kl > 0.1                                               | raise algorithm.kl_coef               |
| entropy_falling  | actor/entropy over the last `window` steps: negative slope   | raise algorithm.entropy_coeff (0.01)  |
|                  | and the fitted line drops by more than 20%                   |                                       |
| gpu_util_low     | mean system/gpu_utilization < 60 (%)                         | raise rollout.max_num_seqs            |
| gpu_memory_low   | mean system/gpu_memory_frac < 0.70                           | raise rollout.gpu_memory_utilization  |
| gpu_memory_high  | mean system/gpu_memory_frac > 0.85                           | lower rollout.gpu_memory_utilization  |
| response_clipped | mean response_length/clip_ratio > 0.5                        | raise rollout.max_new_tokens          |
| reward_zero      | reward/mean == 0 for `window` steps in a row                 | check the reward function             |

"mean" is over the last `window` steps (at least 3 observations), so one noisy sample does
not fire a warning. Short aliases (`kl`, `entropy`, `gpu_utilization`, ...) are read too.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from typing import Optional

from verl.tracking.metrics import lookup


def slope(values: list[float]) -> float:
    """Least-squares slope of `values` against 0..n-1."""
    n = len(values)
    x_mean = (n - 1) / 2
    y_mean = sum(values) / n
    num = sum((i - x_mean) * (v - y_mean) for i, v in enumerate(values))
    den = sum((i - x_mean) ** 2 for i in range(n))
    return num / den if den else 0.0


class HealthMonitor:
    """Feed every step's metrics to `check`; it returns the warnings that are new this step."""

    TRACKED = (
        "actor/kl",
        "actor/entropy",
        "system/gpu_utilization",
        "system/gpu_memory_frac",
        "response_length/clip_ratio",
        "reward/mean",
    )

    def __init__(
        self,
        window: int = 10,
        kl_max: float = 0.1,
        entropy_drop: float = 0.2,
        gpu_util_min: float = 60.0,
        gpu_memory_range: tuple[float, float] = (0.70, 0.85),
        clip_ratio_max: float = 0.5,
        min_points: int = 3,
    ):
        if window < 2:
            raise ValueError(f"HealthMonitor window must be >= 2, got {window}")
        self.window = window
        self.kl_max = kl_max
        self.entropy_drop = entropy_drop
        self.gpu_util_min = gpu_util_min
        self.gpu_memory_range = gpu_memory_range
        self.clip_ratio_max = clip_ratio_max
        self.min_points = min(min_points, window)
        self.history: dict[str, deque] = defaultdict(lambda: deque(maxlen=self.window))
        self.fired: dict[str, str] = {}  # kind -> message, in firing order

    def _mean(self, key: str) -> Optional[float]:
        values = self.history[key]
        return sum(values) / len(values) if len(values) >= self.min_points else None

    def check(self, metrics: dict, step: int) -> list[str]:
        for key in self.TRACKED:
            value = lookup(metrics, key)
            if value is not None and math.isfinite(value):
                self.history[key].append(value)
        new = []
        for kind, message in self._diagnose(metrics, step):
            if kind not in self.fired:
                self.fired[kind] = message
                new.append(message)
        return new

    def _diagnose(self, metrics: dict, step: int):
        kl = lookup(metrics, "actor/kl")
        if kl is not None and math.isfinite(kl) and kl > self.kl_max:  # NaN/Inf: the trainer's bad-step guard
            yield "kl_high", (
                f"step {step}: KL to the reference policy is {kl:.3g} (> {self.kl_max}); the policy is "
                "drifting too far from the original model. Raise algorithm.kl_coef (or algorithm.kl_loss_coef "
                "when algorithm.use_kl_loss is on), or lower training.lr."
            )

        entropy = self.history["actor/entropy"]
        if len(entropy) == self.window:
            values = list(entropy)
            s = slope(values)
            start = sum(values) / len(values) - s * (len(values) - 1) / 2  # fitted value at the window start
            drop = -s * (len(values) - 1) / abs(start) if start else 0.0
            if s < 0 and drop > self.entropy_drop:
                yield "entropy_falling", (
                    f"step {step}: policy entropy fell {drop:.0%} over the last {self.window} steps "
                    f"({values[0]:.3g} -> {values[-1]:.3g}); the model is collapsing onto few answers. "
                    "Raise algorithm.entropy_coeff (e.g. 0.01)."
                )

        util = self._mean("system/gpu_utilization")
        if util is not None and util < self.gpu_util_min:
            yield "gpu_util_low", (
                f"step {step}: GPU utilization averages {util:.0f}% (< {self.gpu_util_min:.0f}%); the GPU is "
                "waiting. Raise rollout.max_num_seqs (and rollout.batch_size) so generation fills the GPU."
            )

        mem = self._mean("system/gpu_memory_frac")
        low, high = self.gpu_memory_range
        if mem is not None and mem < low:
            yield "gpu_memory_low", (
                f"step {step}: GPU memory use averages {mem:.0%} (guidance {low:.0%}-{high:.0%}); memory is "
                "left unused. Raise rollout.gpu_memory_utilization (or rollout.max_num_seqs)."
            )
        if mem is not None and mem > high:
            yield "gpu_memory_high", (
                f"step {step}: GPU memory use averages {mem:.0%} (guidance {low:.0%}-{high:.0%}); out-of-memory "
                "risk. Lower rollout.gpu_memory_utilization (or rollout.max_num_seqs / training.micro_batch_size)."
            )

        clip = self._mean("response_length/clip_ratio")
        if clip is not None and clip > self.clip_ratio_max:
            yield "response_clipped", (
                f"step {step}: {clip:.0%} of responses hit the length limit; rewards see truncated answers. "
                "Raise rollout.max_new_tokens, or turn on algorithm.overlong_penalty.enable."
            )

        reward = self.history["reward/mean"]
        if len(reward) == self.window and all(v == 0.0 for v in reward):
            yield "reward_zero", (
                f"step {step}: reward has been exactly 0 for {self.window} steps; nothing to learn from. "
                "Check the reward function (reward_fn.type and its target/answer key) on a few responses."
            )
