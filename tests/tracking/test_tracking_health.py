"""HealthMonitor: each seed (5.4) signal fires on a synthetic bad stream, once, and stays quiet on healthy ones."""

import random

import pytest

from verl.tracking import HealthMonitor, Tracker
from verl.tracking.health import slope
from verl.config import LoggingConfig


def healthy(step, rng):
    return {
        "reward/mean": 0.3 + 0.01 * step + rng.uniform(-0.05, 0.05),
        "actor/kl": 0.02 + rng.uniform(0, 0.03),
        "actor/entropy": 2.0 + rng.uniform(-0.1, 0.1),  # noisy but flat
        "response_length/mean": 20 + rng.uniform(-2, 2),
        "response_length/clip_ratio": rng.uniform(0, 0.2),
        "system/gpu_utilization": rng.uniform(75, 98),
        "system/gpu_memory_frac": rng.uniform(0.72, 0.83),
    }


def run(stream, monitor=None):
    monitor = monitor or HealthMonitor(window=10)
    fired = []
    for step, metrics in enumerate(stream, start=1):
        fired += [(step, msg) for msg in monitor.check(metrics, step)]
    return fired, monitor


def test_quiet_on_healthy_stream():
    rng = random.Random(0)
    fired, monitor = run([healthy(s, rng) for s in range(200)])
    assert fired == [] and monitor.fired == {}


def test_quiet_on_stream_without_system_metrics():
    fired, _ = run([{"reward/mean": 0.5, "actor/kl": 0.01, "actor/entropy": 2.0}] * 50)
    assert fired == []


def with_bad(step, rng, **bad):
    metrics = healthy(step, rng)
    metrics.update(bad)
    return metrics


def test_kl_above_threshold_fires_once_with_advice():
    rng = random.Random(1)
    stream = [healthy(s, rng) for s in range(5)] + [with_bad(s, rng, **{"actor/kl": 0.15}) for s in range(20)]
    fired, monitor = run(stream)
    assert len(fired) == 1
    step, message = fired[0]
    assert step == 6 and "algorithm.kl_coef" in message and "0.15" in message
    assert list(monitor.fired) == ["kl_high"]


def test_short_alias_kl_divergence_is_read():
    fired, _ = run([{"kl_divergence": 0.2}])
    assert len(fired) == 1 and "kl_coef" in fired[0][1]


def test_entropy_falling_steadily_fires():
    rng = random.Random(2)
    stream = [with_bad(s, rng, **{"actor/entropy": 2.0 * (0.95**s)}) for s in range(30)]  # -5% per step
    fired, monitor = run(stream)
    assert [m for _, m in fired if "entropy" in m] and "algorithm.entropy_coeff" in fired[0][1]
    assert list(monitor.fired) == ["entropy_falling"]
    assert fired[0][0] == 10  # needs a full window


def test_entropy_small_decline_is_quiet():
    stream = [{"actor/entropy": 2.0 - 0.01 * s} for s in range(40)]  # 0.5% per step: < 20% over 10 steps
    assert run(stream)[0] == []


def test_entropy_drop_then_recovery_is_quiet():
    values = [2.0, 1.2, 2.1, 1.9, 2.2, 2.0, 2.1, 1.95, 2.05, 2.0, 2.1, 2.0]  # one dip, no trend
    assert run([{"actor/entropy": v} for v in values])[0] == []


def test_gpu_utilization_low_fires():
    rng = random.Random(3)
    stream = [with_bad(s, rng, **{"system/gpu_utilization": rng.uniform(30, 50)}) for s in range(10)]
    fired, monitor = run(stream)
    assert list(monitor.fired) == ["gpu_util_low"]
    assert "rollout.max_num_seqs" in fired[0][1]


def test_one_low_gpu_reading_is_quiet():
    rng = random.Random(4)
    stream = [healthy(s, rng) for s in range(20)]
    stream[7]["system/gpu_utilization"] = 5.0
    assert run(stream)[0] == []


@pytest.mark.parametrize("frac,kind,word", [(0.40, "gpu_memory_low", "Raise"), (0.95, "gpu_memory_high", "Lower")])
def test_gpu_memory_outside_70_85(frac, kind, word):
    rng = random.Random(5)
    fired, monitor = run([with_bad(s, rng, **{"system/gpu_memory_frac": frac}) for s in range(10)])
    assert list(monitor.fired) == [kind]
    assert f"{word} rollout.gpu_memory_utilization" in fired[0][1]


def test_responses_clipped_fires():
    rng = random.Random(6)
    fired, monitor = run([with_bad(s, rng, **{"response_length/clip_ratio": 0.8}) for s in range(10)])
    assert list(monitor.fired) == ["response_clipped"]
    assert "rollout.max_new_tokens" in fired[0][1]


def test_reward_flat_at_zero_fires_after_window():
    rng = random.Random(7)
    fired, monitor = run([with_bad(s, rng, **{"reward/mean": 0.0}) for s in range(25)])
    assert list(monitor.fired) == ["reward_zero"] and fired[0][0] == 10
    assert "reward function" in fired[0][1]


def test_reward_zero_then_nonzero_is_quiet():
    stream = [{"reward/mean": 0.0}] * 9 + [{"reward/mean": 0.1}] + [{"reward/mean": 0.0}] * 9
    assert run(stream)[0] == []


def test_non_finite_values_are_ignored():
    stream = [{"actor/kl": float("nan"), "actor/entropy": float("nan"), "reward/mean": float("inf")}] * 20
    assert run(stream)[0] == []


def test_slope():
    assert slope([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert slope([3.0, 3.0, 3.0]) == 0.0
    assert slope([4.0, 2.0, 0.0]) == pytest.approx(-2.0)


def test_tracker_prints_and_records_health_warnings_once(tmp_path):
    printed = []
    tracker = Tracker(LoggingConfig(backends=[]), str(tmp_path), {}, printer=printed.append)
    new = [tracker.log({"actor/kl": 0.3}, step) for step in range(1, 4)]
    tracker.close()
    assert len(new[0]) == 1 and new[1] == [] and new[2] == []
    assert len(printed) == 1 and printed[0].startswith("WARNING [health]")
    text = (tmp_path / "text.jsonl").read_text()
    assert text.count('"key": "health"') == 1
