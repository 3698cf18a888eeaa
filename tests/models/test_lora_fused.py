"""model.lora.fused (verl/models/lora_fused.py): the fused LoRA linear against values derived by hand, against
peft's own forward (values and gradients), the calls that must go through peft's forward, and a run's update."""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch

from conftest import small_overrides
from verl.models.lora_fused import _LoraLinearFn, fuse_lora_linears, fused_lora_linear


def test_the_fused_function_against_values_derived_by_hand():
    # x = [1, 2]; W = [[1, 0], [0, 1], [1, 1]], b = [0.5, 0, 0]; A = [[1, 1]] (r = 1), B = [[1], [0], [2]], s = 0.5.
    #   t = x A^T = 3;  s t B^T = [1.5, 0, 3];  x W^T + b = [1.5, 2, 3]  ->  y = [3, 2, 6]
    # dy = [1, 1, 1]:
    #   g = dy (s B) = 0.5 (1 + 0 + 2) = 1.5;  dx = g A + dy W = [1.5, 1.5] + [2, 2] = [3.5, 3.5]
    #   dA = g^T x = [1.5, 3];  d(sB) = dy^T t = [3, 3, 3]^T, so dB = s d(sB) = [1.5, 1.5, 1.5]^T
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = torch.tensor([0.5, 0.0, 0.0])
    a = torch.tensor([[1.0, 1.0]], requires_grad=True)
    bb = torch.tensor([[1.0], [0.0], [2.0]], requires_grad=True)
    y = fused_lora_linear(x, w, b, a, bb, 0.5)
    assert y.tolist() == [[3.0, 2.0, 6.0]]
    y.sum().backward()
    assert x.grad.tolist() == [[3.5, 3.5]]
    assert a.grad.tolist() == [[1.5, 3.0]]
    assert bb.grad.tolist() == [[1.5], [1.5], [1.5]]


def test_the_fused_function_passes_gradcheck():
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True),
            torch.randn(3, 4, generator=gen, dtype=torch.float64),
            torch.randn(3, generator=gen, dtype=torch.float64),
            torch.randn(2, 4, generator=gen, dtype=torch.float64, requires_grad=True),
            torch.randn(3, 2, generator=gen, dtype=torch.float64, requires_grad=True)]
    assert torch.autograd.gradcheck(_LoraLinearFn.apply, args)


def _adapted(path, dropout=0.0, seed=0):
    from transformers import AutoModelForCausalLM

    from verl.config.model import LoraConfig
    from verl.models.lora import apply_lora

    torch.manual_seed(seed)  # peft draws A at random: the same A for the same seed
    # peft's own forward (fused=False): the tests fuse a copy of it themselves
    model = apply_lora(AutoModelForCausalLM.from_pretrained(path),
                       LoraConfig(rank=4, alpha=8, dropout=dropout, fused=False))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # peft starts B at 0: make the adapters' deltas non-zero
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def _loss_and_grads(model, ids, autocast=False):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids).logits.float()
    loss = torch.log_softmax(logits, -1)[..., 3].mean()
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def _relative_error(got, want) -> float:
    return float((got - want).norm() / want.norm())


def test_fused_equals_peft_in_values_and_adapter_gradients(tiny_qwen2):
    peft_model = _adapted(tiny_qwen2)
    fused = copy.deepcopy(peft_model)
    n = fuse_lora_linears(fused)
    # the tiny Qwen2's 2 layers x 7 linear maps (q, k, v, o, gate, up, down) are adapted under all-linear
    assert n == 14
    ids = torch.randint(0, peft_model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    want, want_g = _loss_and_grads(peft_model, ids)
    got, got_g = _loss_and_grads(fused, ids)
    assert set(got_g) == set(want_g) and all("lora_" in k for k in got_g)
    # float32: the same sums in another order: ulps of logits ~1 (observed ~1e-7), and of the gradients
    assert torch.allclose(got, want, atol=1e-5 * float(want.abs().max()))
    for k in want_g:
        assert torch.allclose(got_g[k], want_g[k], atol=1e-5 * float(want_g[k].abs().max()) + 1e-12), k
    # under bf16 autocast both paths round at every matmul (peft keeps its adapter term in float32, we in
    # bf16 with s folded into B): each is some 1-3% (norm) off the float32 values above, in its own
    # direction. Fused must be as accurate as peft: its error at most 1.5x peft's, per tensor.
    peft_lo, peft_g = _loss_and_grads(peft_model, ids, autocast=True)
    fused_lo, fused_g = _loss_and_grads(fused, ids, autocast=True)
    assert _relative_error(fused_lo, want) <= 1.5 * _relative_error(peft_lo, want) + 1e-4
    worse = {k: (_relative_error(fused_g[k], want_g[k]), _relative_error(peft_g[k], want_g[k])) for k in want_g}
    assert all(f <= 1.5 * p + 2e-3 for f, p in worse.values()), worse
    assert max(f for f, _ in worse.values()) < 0.1  # and bf16's error, not a wrong gradient


@pytest.fixture
def fused_calls(monkeypatch):
    """How many layer calls took the fused path since the test began."""
    import verl.models.lora_fused as mod

    calls = []
    real = mod.fused_lora_linear

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(mod, "fused_lora_linear", counted)
    return calls


def test_calls_the_fused_path_cannot_take_run_peft_forward(tiny_qwen2, fused_calls):
    from transformers import AutoModelForCausalLM

    from verl.models.lora import adapters_disabled

    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(2))
    # adapters disabled (the reference policy): the base model's own logits
    fused = _adapted(tiny_qwen2)
    fuse_lora_linears(fused)
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen2)
    with torch.no_grad(), adapters_disabled(fused):
        assert torch.equal(fused(input_ids=ids).logits, base(input_ids=ids).logits)
    assert not fused_calls
    with torch.no_grad():
        fused(input_ids=ids)
    assert len(fused_calls) == 14  # adapters on again: every adapted layer fused
    fused_calls.clear()
    # dropout > 0 in training mode draws its mask inside peft's forward: the same draws as peft's own model
    plain = _adapted(tiny_qwen2, dropout=0.3)
    with_fuse = copy.deepcopy(plain)
    fuse_lora_linears(with_fuse)
    plain.train(), with_fuse.train()
    torch.manual_seed(5)
    a = plain(input_ids=ids).logits
    torch.manual_seed(5)
    b = with_fuse(input_ids=ids).logits
    assert torch.equal(a, b) and not fused_calls
    # merged adapters (peft's merge_and_unload for a save) compute W + s B A in the base layer
    merged_fused = _adapted(tiny_qwen2)
    fuse_lora_linears(merged_fused)
    merged_fused.merge_adapter()
    unmerged = _adapted(tiny_qwen2)
    with torch.no_grad():
        assert torch.allclose(merged_fused(input_ids=ids).logits, unmerged(input_ids=ids).logits, atol=1e-5)
    assert not fused_calls
    # fusing twice routes nothing a second time
    assert fuse_lora_linears(merged_fused) == 0


def test_a_run_with_fused_lora_trains_as_peft(tmp_path, tiny_qwen2, fused_calls):
    from verl import create_trainer, load_config

    rows, taken = {}, {}
    for fused in (False, True):
        out = tmp_path / f"fused_{fused}"
        cfg = load_config(None, small_overrides(out, **{"model.name": tiny_qwen2, "model.lora.rank": 4,
                                                        "model.lora.fused": str(fused).lower(), "seed": 3}))
        create_trainer(cfg).train()
        with open(os.path.join(out, "out", "metrics.jsonl")) as fh:
            rows[fused] = [json.loads(line) for line in fh if '"actor/pg_loss"' in line]
        taken[fused] = len(fused_calls)
    assert taken[False] == 0 and taken[True] > 0  # the fused run's actor passes did take the fused path
    assert len(rows[False]) == len(rows[True]) == 2
    # the same samples (seeded rollouts from the same start) and float32 rounding in the update's sums:
    # losses and gradient norms to 1e-4 relative
    for a, b in zip(rows[False], rows[True]):
        for key in ("actor/pg_loss", "actor/grad_norm", "reward/mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


@pytest.mark.gpu
def test_fused_equals_peft_on_cuda_with_a_bf16_base(tiny_qwen2):
    """As verl holds a LoRA model on a GPU: the frozen base in bf16, float32 adapters, bf16 autocast (cuBLAS's
    addmm with its C input, not the CPU's). Fused must be as accurate as peft against the float32 model."""
    peft_model = _adapted(tiny_qwen2).cuda()
    truth = copy.deepcopy(peft_model)  # float32 throughout: the reference values
    for name, p in peft_model.named_parameters():
        if not p.requires_grad:
            p.data = p.data.to(torch.bfloat16)
    fused = copy.deepcopy(peft_model)
    assert fuse_lora_linears(fused) == 14
    ids = torch.randint(0, peft_model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1)).cuda()

    def run(model, autocast):
        model.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids).logits.float()
        torch.log_softmax(logits, -1)[..., 3].mean().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    want, want_g = run(truth, False)
    peft_lo, peft_g = run(peft_model, True)
    fused_lo, fused_g = run(fused, True)
    # the CPU test's bound: each bf16 path some 1-3% (norm) off the float32 values; fused at most 1.5x peft's
    assert _relative_error(fused_lo, want) <= 1.5 * _relative_error(peft_lo, want) + 1e-4
    worse = {k: (_relative_error(fused_g[k], want_g[k]), _relative_error(peft_g[k], want_g[k])) for k in want_g}
    assert all(f <= 1.5 * p + 2e-3 for f, p in worse.values()), worse
    assert max(f for f, _ in worse.values()) < 0.1


def test_unfused_lora_layers_counts_the_layers_on_peft_forward(tiny_qwen2):
    """What the compiled actor logs (verl.workers.compile.note_compiled_peft_layers): the LoRA layers that run
    peft's own forward. The tiny Qwen2 has 2 layers x 7 adapted linear maps; the tiny Qwen3-MoE's 2 layers
    each adapt their experts as two nested ParamWrappers (gate_up_proj, down_proj) and the router's weight."""
    from transformers import AutoModelForCausalLM

    from verl.config.model import LoraConfig
    from verl.models.lora import apply_lora
    from verl.models.lora_fused import unfused_lora_layers
    from verl.models.tiny import tiny_model_path

    def count(path, **lora):
        return unfused_lora_layers(apply_lora(AutoModelForCausalLM.from_pretrained(path),
                                              LoraConfig(rank=4, alpha=8, **lora)))

    assert count(tiny_qwen2) == 0  # every layer fused
    assert count(tiny_qwen2, fused=False) == 14
    assert count(tiny_qwen2, dropout=0.1) == 14  # fused, but each call with a dropout takes peft's forward
    assert count(tiny_model_path("qwen3_moe")) == 2 * 3
