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
    t = SimpleNamespace(warmup_steps=warmup, total_steps=total, lr_scheduler=kind, min_lr_ratio=floor)
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
                        critic_lr_scheduler=None, min_lr_ratio=0.0, critic_min_lr_ratio=0.5)
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
