"""The learning-rate schedule's floor (training.min_lr_ratio), its decay kinds and the optimizer's
weight-decay groups (training.weight_decay_1d), against values derived by hand from the formulas
real verl's engines use (verl/workers/optim.py's lr_multiplier docstring):

    FSDP cosine with min_lr_ratio m:  max(m, (1 - m) / 2 cos(pi p) + (1 + m) / 2)
    Megatron's OptimizerParamScheduler:  min_lr + c (lr - min_lr),  c = 1 - p (linear), (1 + cos(pi p)) / 2
    (cosine); inverse-square-root: max(min_lr, lr sqrt(max(W, 1)) / sqrt(max(s, 1)));  p = (s - W) / (T - W)
"""

import math
from types import SimpleNamespace

import pytest
import torch

from verl.config import load_config
from verl.errors import ConfigError
from verl.workers.optim import build_optimizer, build_scheduler, lr_multiplier


def _lrs(kind, warmup, total, floor, base=1.0):
    t = SimpleNamespace(warmup_steps=warmup, total_steps=total, lr_scheduler=kind, min_lr_ratio=floor,
                        warmup_start_ratio=0.0, lr_decay_steps=None, warmup_from_first_step=False)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    scheduler, out = build_scheduler(opt, t), []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return out


def test_linear_decays_to_the_floor():
    # W = 2, T = 6, m = 0.1: warm-up 0, 0.5; then p = 0, 1/4, 2/4, 3/4 -> 0.1 + 0.9 (1 - p)
    assert _lrs("linear", 2, 6, 0.1) == pytest.approx([0.0, 0.5, 1.0, 0.775, 0.55, 0.325])
    assert lr_multiplier(6, 2, 6, "linear", 0.1) == pytest.approx(0.1)  # p = 1: the floor
    assert lr_multiplier(9, 2, 6, "linear", 0.1) == 0.1  # past T: the floor, as Megatron's s > decay steps


def test_cosine_with_a_floor_is_real_verls_fsdp_formula_and_megatrons():
    m = 0.2
    got = _lrs("cosine", 0, 4, m, base=2e-6)  # Megatron: lr 2e-6, min_lr 4e-7
    # p = 0, 1/4, 1/2, 3/4: (1 + cos(pi p)) / 2 = 1, 0.853553, 0.5, 0.146447
    want_megatron = [4e-7 + c * (2e-6 - 4e-7) for c in (1.0, 0.8535533905932737, 0.5, 0.14644660940672627)]
    assert got == pytest.approx(want_megatron, rel=1e-12)
    want_fsdp = [2e-6 * max(m, (1 - m) * 0.5 * math.cos(math.pi * p) + (1 + m) * 0.5) for p in (0, 0.25, 0.5, 0.75)]
    assert got == pytest.approx(want_fsdp, rel=1e-12)
    assert _lrs("cosine", 0, 4, 0.0) == pytest.approx([1.0, 0.8535533905932737, 0.5, 0.14644660940672627])


def test_inverse_sqrt_after_the_warm_up():
    # W = 4: 0, 0.25, 0.5, 0.75, then sqrt(4 / s): s = 4 -> 1, 9 -> 2/3, 16 -> 0.5, floored at m = 0.6 there
    assert _lrs("inverse_sqrt", 4, 5, 0.0) == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert lr_multiplier(9, 4, 20, "inverse_sqrt") == pytest.approx(2 / 3)
    assert lr_multiplier(16, 4, 20, "inverse_sqrt", 0.6) == 0.6
    assert lr_multiplier(3, 0, 20, "inverse_sqrt") == pytest.approx(1 / math.sqrt(3))  # W = 0: max(W, 1) = 1


def test_constant_ignores_the_floor():
    assert _lrs("constant", 2, 4, 0.5) == [0.0, 0.5, 1.0, 1.0]


def test_the_critic_has_its_own_floor():
    t = SimpleNamespace(warmup_steps=0, critic_warmup_steps=None, total_steps=2, lr_scheduler="linear",
                        critic_lr_scheduler=None, min_lr_ratio=0.0, critic_min_lr_ratio=0.5, warmup_start_ratio=0.0,
                        critic_warmup_start_ratio=None, lr_decay_steps=None, critic_lr_decay_steps=None,
                        warmup_from_first_step=False)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_scheduler(opt, t, critic=True)
    opt.step()
    scheduler.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.75)  # p = 1/2: 0.5 + 0.5 x 0.5


def test_min_lr_ratio_is_a_fraction():
    with pytest.raises(ConfigError, match="training.min_lr_ratio"):
        load_config(None, ["model.name=tiny:gpt2", "training.min_lr_ratio=1.5"])
    with pytest.raises(ConfigError, match="training.lr_scheduler"):
        load_config(None, ["model.name=tiny:gpt2", "training.lr_scheduler=wsd"])


def test_weight_decay_skips_1d_weights_as_megatrons_optimizer():
    layer = torch.nn.Linear(3, 2)  # weight (2, 3), bias (2,)
    norm = torch.nn.LayerNorm(2)  # weight (2,), bias (2,)
    params = list(layer.parameters()) + list(norm.parameters())
    both = build_optimizer(params, 1e-3, 0.1, torch.device("cpu"))
    assert [g["weight_decay"] for g in both.param_groups] == [0.1]
    megatron = build_optimizer(params, 1e-3, 0.1, torch.device("cpu"), decay_1d=False)
    assert [(len(g["params"]), g["weight_decay"]) for g in megatron.param_groups] == [(1, 0.1), (3, 0.0)]
    # one AdamW step at zero gradient: only decay moves a weight, w (1 - lr wd) for the 2-D one, 1-D unchanged
    for p in params:
        p.grad = torch.zeros_like(p)
    before = [p.detach().clone() for p in params]
    megatron.step()
    assert torch.allclose(params[0], before[0] * (1 - 1e-3 * 0.1))
    assert all(torch.equal(p, b) for p, b in zip(params[1:], before[1:]))


# ---- the warm-up's start, its first step, the decay's end and sqrt (VeOmni's and TorchTitan's schedules)


def test_warm_up_from_a_start_ratio_as_veomni_lr_start():
    # VeOmni: (lr_start + (lr - lr_start) s / W) / lr; lr 1e-6, lr_start 2e-7 (a = 0.2), W = 4:
    # s = 0..3 -> 0.2, 0.4, 0.6, 0.8, then 1
    got = [lr_multiplier(s, 4, 10, "constant", start_ratio=0.2) for s in range(6)]
    assert got == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 1.0])


def test_cosine_decay_ending_before_the_last_step_as_veomni_lr_decay_ratio():
    # T = 10, lr_decay_ratio 0.6 -> D = 6, W = 2, m = 0.1: p = (s - 2) / 4 for s = 2..6, then 0.1
    # (1 + cos(pi p)) / 2 at p = 0, 1/4, 1/2, 3/4, 1: 1, 0.853553, 0.5, 0.146447, 0
    want = [0.0, 0.5] + [0.1 + 0.9 * c for c in (1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0)] + [0.1] * 3
    got = [lr_multiplier(s, 2, 10, "cosine", 0.1, decay_steps=6) for s in range(10)]
    assert got == pytest.approx(want)
    # D below W: straight from the warm-up to the floor (VeOmni: s > D), D = W: one step at lr first
    assert [lr_multiplier(s, 4, 10, "cosine", 0.1, decay_steps=3) for s in (3, 4, 5)] == pytest.approx([0.75, 0.1, 0.1])
    assert [lr_multiplier(s, 4, 10, "cosine", 0.1, decay_steps=4) for s in (4, 5)] == pytest.approx([1.0, 0.1])


def test_warm_up_from_the_first_step_then_a_stable_step_as_torchtitan():
    # TorchTitan, W = 3, N = 8 (its training.steps), linear, min_lr_factor 0.2: (s + 1) / 3 for s = 0..2,
    # 1 at s = 3 (its stable step), then p = (s + 1 - 4) / 5 for s = 4..7: 0.2 + 0.8 (1 - p)
    want = [1 / 3, 2 / 3, 1.0, 1.0, 0.84, 0.68, 0.52, 0.36]
    got = [lr_multiplier(s, 3, 8, "linear", 0.2, from_first_step=True) for s in range(8)]
    assert got == pytest.approx(want)


def test_sqrt_decay_as_torchtitans():
    # W = 0, N = 4, m = 0: 1 - sqrt(p), p = s / 4: 1, 0.5, 1 - sqrt(1/2), 1 - sqrt(3/4), then 0 at s = 4
    got = [lr_multiplier(s, 0, 4, "sqrt") for s in range(5)]
    assert got == pytest.approx([1.0, 0.5, 0.2928932188134524, 0.1339745962155614, 0.0])


def test_decay_over_more_steps_than_the_run():
    # D = 100 in a 5-step run (TorchTitan's 10000-step horizon in small): linear from 1 by 1/100 a step
    t = SimpleNamespace(warmup_steps=0, total_steps=5, lr_scheduler="linear", min_lr_ratio=0.0, warmup_start_ratio=0.0,
                        lr_decay_steps=100, warmup_from_first_step=False)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler, out = build_scheduler(opt, t), []
    for _ in range(5):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert out == pytest.approx([1.0, 0.99, 0.98, 0.97, 0.96])
