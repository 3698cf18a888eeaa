"""System metrics, MFU helpers and the progress bar."""

import io
import time

import pytest
import torch

from verl.tracking import GpuUtilSampler, ProgressBar, gpu_peak_flops, system_metrics


def test_system_metrics_cpu():
    metrics = system_metrics()
    assert 0.001 < metrics["system/cpu_memory_gb"] < 1024
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        # never a made-up GPU number on a machine (or process) without CUDA
        assert not any(k.startswith("system/gpu") for k in metrics)


def test_cpu_run_on_a_gpu_machine_reads_no_gpu(monkeypatch):
    """Regression: a `device: cpu` run on a machine whose CUDA had been initialised called
    torch.cuda.mem_get_info("cpu") and failed ("Expected a cuda device"); the step timer had
    initialised CUDA by synchronising. Here CUDA is made to look available and initialised."""
    from verl.trainer.timer import StageTimer

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: calls.append("is_initialized") or False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("synchronize"))
    StageTimer()("stage", lambda: None)
    assert calls == ["is_initialized"]  # not initialised: no synchronize (which would initialise it)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: pytest.fail(f"GPU read for device {d}"))
    metrics = system_metrics(torch.device("cpu"))
    assert not any(k.startswith("system/gpu") for k in metrics)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_system_metrics_gpu():
    x = torch.ones(1024, 1024, device="cuda")
    metrics = system_metrics()
    assert metrics["system/gpu_memory_gb"] > 0 and 0 < metrics["system/gpu_memory_frac"] <= 1
    assert metrics["system/gpu_memory_peak_gb"] >= x.numel() * 4 / 1024**3
    if "system/gpu_utilization" in metrics:
        assert 0 <= metrics["system/gpu_utilization"] <= 100


def test_gpu_peak_flops_table():
    assert gpu_peak_flops("NVIDIA H200") == 989e12
    assert gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpu_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_peak_flops("NVIDIA A10G") is None
    assert gpu_peak_flops("Tesla T4-like unknown") is None
    assert gpu_peak_flops(None) is None


def test_gpu_util_sampler_averages_readings():
    readings = iter([10.0, 20.0, None, 30.0] + [90.0] * 10000)
    sampler = GpuUtilSampler(interval_s=0.001, read=lambda: next(readings)).start()
    deadline = time.time() + 5
    while time.time() < deadline and len(sampler._values) < 3:
        time.sleep(0.001)
    sampler.stop()
    mean = sampler.mean_and_reset()
    assert mean is not None and 10.0 <= mean <= 90.0
    assert sampler.mean_and_reset() is None  # reset


def test_progress_bar_writes_eta_and_postfix():
    out = io.StringIO()
    bar = ProgressBar(total=4, enabled=True, file=out)
    for _ in range(4):
        bar.update(1, {"reward": 0.5321, "kl": 0.0123})
    bar.close()
    text = out.getvalue()
    assert "4/4" in text and "reward=0.532" in text and "kl=0.0123" in text
    assert "<00:00" in text  # the ETA field


def test_progress_bar_disabled_is_a_no_op():
    out = io.StringIO()
    bar = ProgressBar(total=4, enabled=False, file=out)
    bar.update(1, {"reward": 1.0})
    bar.close()
    assert out.getvalue() == ""
