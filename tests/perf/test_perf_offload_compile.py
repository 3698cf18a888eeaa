"""Offload helpers (their CPU-side contracts; the GPU figures are in benchmarks/memory.py) and
`model.torch_compile` (compiled layers == eager)."""


import pytest
import torch

from verl.workers.offload import IdleOffload, OptimizerOffload
from verl.workers.reference import frozen_copy


def test_frozen_copy_is_detached_tied_and_cast(tiny_qwen2):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2)
    ref = frozen_copy(model, torch.device("cpu"), torch.bfloat16)
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    assert all(p.dtype == torch.bfloat16 for p in ref.parameters())
    assert ref.lm_head.weight is ref.model.embed_tokens.weight  # tied weights stay one tensor
    assert ref.model.embed_tokens.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(1.0)  # training the actor leaves the copy alone
    assert not torch.allclose(ref.model.embed_tokens.weight.float(), model.model.embed_tokens.weight, atol=0.5)


def test_offload_is_a_no_op_on_cpu():
    p = torch.nn.Parameter(torch.randn(4))
    opt = torch.optim.AdamW([p])
    p.grad = torch.ones(4)
    opt.step()
    state = {k: v.clone() for k, v in opt.state[p].items()}
    off = OptimizerOffload(opt)
    assert off.offload() == 0 and off.load() == 0  # already in host memory: nothing moves
    assert all(torch.equal(opt.state[p][k], v) for k, v in state.items())
    module = torch.nn.Linear(2, 2)
    idle = IdleOffload(module, torch.device("cpu"), enabled=True, optimizer=opt)
    assert not idle.enabled
    with idle.active():
        assert module.weight.device.type == "cpu"


def _compiled_equals_eager(model, packed: bool) -> None:
    """The log-probs and gradients of response_log_probs with the decoder layers compiled equal eager's."""
    import contextlib

    from verl.workers.compile import CompiledLayers
    from verl.workers.logprobs import response_log_probs

    compiled = CompiledLayers(model, True)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 14), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    mask[1, 10:] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0) * mask
    rmask = mask[:, 8:].float()
    trained = [p for p in model.parameters() if p.requires_grad]

    def run(ctx):
        model.zero_grad()
        with ctx:
            lp, _ = response_log_probs(model, ids, mask, pos, 6, packed=packed)
        (lp * rmask).sum().backward()
        return lp.detach(), [p.grad.clone() for p in trained]

    lp0, g0 = run(contextlib.nullcontext())
    lp1, g1 = run(compiled.active())
    # Inductor's generated kernels (fused elementwise ops, their own reductions) vs eager: float32
    # ulps of log-probs ~1-10 (observed <= 1.4e-6) and of gradients (observed <= 2.6e-6 of each
    # tensor's largest element). atol 1e-4 for both: generous, and still far below a wrong layer.
    assert torch.allclose(lp0 * rmask, lp1 * rmask, atol=1e-4)
    for a, b in zip(g0, g1):
        assert torch.allclose(a, b, atol=1e-4 * float(a.abs().max()) + 1e-7)
    assert "forward" not in vars(compiled.layers[0])  # eager again outside active()


@pytest.mark.parametrize("packed", [True, False])  # compiles for about a minute each on a CPU
def test_compiled_layers_equal_eager(tiny_qwen2, packed):
    from transformers import AutoModelForCausalLM

    from verl.workers.packing import causal_lm_trunk, prepare_packing

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2)
    prepare_packing(causal_lm_trunk(model))
    _compiled_equals_eager(model, packed)


@pytest.mark.parametrize("fused", [False, True])
def test_compiled_layers_with_lora_equal_eager(tiny_qwen2, fused):
    """model.torch_compile with LoRA (peft's adapter layers inside the compiled decoder layers; auto turns
    it on for LoRA only with model.lora.fused, docs/performance.md): the same log-probs and adapter
    gradients as eager, the frozen base getting none. fused: model.lora.fused's autograd function traced
    inside the compiled layers (verl/models/lora_fused.py)."""
    from transformers import AutoModelForCausalLM

    from verl.config.model import LoraConfig
    from verl.models.lora import apply_lora

    torch.manual_seed(0)
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_qwen2), LoraConfig(rank=4, alpha=8, fused=fused))
    assert any(hasattr(m, "_peft_forward") for m in model.modules()) == fused
    for name, p in model.named_parameters():  # peft starts B at 0: make the adapters' deltas non-zero
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    _compiled_equals_eager(model, packed=False)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("with_entropy", [True, False])
def test_fused_head_equals_eager(with_entropy, device):
    """The compiled chunk math (one-hot as a comparison, in-place write; chunks of 16, 16, 5
    rows: a static graph, then a rows-dynamic one) == the eager math (scatter)."""
    from verl.workers.logprobs import head_log_probs

    gen = torch.Generator().manual_seed(0)
    n, h, v = 37, 16, 300
    with torch.random.fork_rng(devices=[]):  # a seeded head, whatever ran before
        torch.manual_seed(0)
        head = torch.nn.Linear(h, v, bias=False).to(device)
    targets = torch.randint(0, v, (n,), generator=gen).to(device)
    hidden = torch.randn(n, h, generator=gen).to(device).requires_grad_()
    g = torch.randn(n, generator=gen).to(device)
    results = []
    for fused in (False, True):
        lp, ent = head_log_probs(hidden, head, targets, temperature=0.7, chunk_size=16, with_entropy=with_entropy,
                                 fused=fused)
        loss = (lp * g).sum() + (ent * g).sum() * with_entropy
        results.append((lp.detach(), ent.detach(), *torch.autograd.grad(loss, (hidden, head.weight))))
    # The same chunk math compiled (fused, one-hot as a comparison) vs eager (scatter): float32
    # ulps of values ~1-6 and of gradients (observed <= 1e-7). 1e-5 of the largest + 1e-6.
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-5 * float(b.abs().max()) + 1e-6)



def test_compiled_layers_with_gradient_checkpointing_train_as_eager(tmp_path, monkeypatch, tiny_gpt2):
    """model.torch_compile with model.enable_gradient_checkpointing (both on with the GPU's auto defaults):
    the backward recomputes each layer, and a recompute through the eager layer after the compiled forward
    stopped the update with torch.utils.checkpoint's "Recomputed values ... have different metadata".
    The first optimizer step's gradients equal the eager run's (the tolerance of test_compiled_layers_equal_eager:
    Inductor's fused kernels against eager's, float32 ulps)."""
    from conftest import capture_first_grads, small_overrides
    from verl import create_trainer, load_config

    grads = {}
    for compiled in (False, True):
        captured = capture_first_grads(monkeypatch)
        over = {"model.name": tiny_gpt2, "algorithm.name": "grpo", "training.total_steps": 1,
                "model.enable_gradient_checkpointing": "true", "model.torch_compile": str(compiled).lower(),
                "checkpoint.save_dir": str(tmp_path / f"c{int(compiled)}")}
        create_trainer(load_config(None, small_overrides(tmp_path, **over))).step()
        grads[compiled] = captured["actor"]
    assert len(grads[True]) == len(grads[False]) > 0
    for a, b in zip(grads[False], grads[True]):
        assert torch.allclose(a, b, atol=1e-4 * float(a.abs().max()) + 1e-7)


def test_compiled_fused_lora_trains_as_eager_with_the_reference_through_disabled_adapters(tmp_path, monkeypatch,
                                                                                           tiny_qwen2):
    """The GPU's auto defaults for LoRA: model.lora.fused's layers inside the compiled decoder layers, with a KL
    loss whose reference policy is the same module with its adapters disabled (peft's path, inside the same
    compiled layers). The first optimizer step's gradients equal eager's (Inductor's kernels against eager's,
    float32 ulps), and the second step, whose forward must see the adapters the first step changed, has the
    same losses: a compiled graph that kept the first adapters as constants would leave the policy at the
    reference, its KL exactly 0."""
    import json
    import os

    from conftest import capture_first_grads, small_overrides
    from verl import create_trainer, load_config

    grads, rows = {}, {}
    for compiled in (False, True):
        captured = capture_first_grads(monkeypatch)
        out = tmp_path / f"c{int(compiled)}"
        over = {"model.name": tiny_qwen2, "model.lora.rank": 4, "model.lora.alpha": 8, "algorithm.name": "grpo",
                "algorithm.use_kl_loss": "true", "algorithm.kl_loss_coef": 0.1, "seed": 3,
                "model.torch_compile": str(compiled).lower(), "checkpoint.save_dir": str(out)}
        create_trainer(load_config(None, small_overrides(tmp_path, **over))).train()
        grads[compiled] = captured["actor"]
        with open(os.path.join(out, "metrics.jsonl")) as fh:
            rows[compiled] = [json.loads(line) for line in fh if '"actor/pg_loss"' in line]
    assert len(grads[True]) == len(grads[False]) > 0
    for a, b in zip(grads[False], grads[True]):
        assert torch.allclose(a, b, atol=1e-4 * float(a.abs().max()) + 1e-7)
    assert len(rows[False]) == len(rows[True]) == 2
    eager, comp = rows[False][1], rows[True][1]
    # the policy left the reference (KL ~1e-3 here); the same losses to float32 rounding (observed ~1e-7)
    assert eager["actor/kl_loss"] > 1e-5 and comp["actor/kl_loss"] > 1e-5
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert comp[key] == pytest.approx(eager[key], rel=1e-3, abs=1e-6), key


def test_a_compiled_actor_names_its_lora_layers_on_peft_forward(tmp_path, caplog):
    """LoRA on an MoE model's experts (peft's ParamWrapper, no fused path) inside the compiled layers: the
    actor says how many such layers there are and the key that keeps them eager; fused dense LoRA says nothing."""
    import logging

    from conftest import small_overrides
    from verl import create_trainer, load_config

    for name, expected in (("tiny:qwen3_moe", True), ("tiny:qwen2", False)):
        caplog.clear()
        over = {"model.name": name, "model.lora.rank": 4, "model.torch_compile": "true",
                "checkpoint.save_dir": str(tmp_path / name.replace(":", "_"))}
        with caplog.at_level(logging.WARNING, logger="verl.workers.compile"):
            create_trainer(load_config(None, small_overrides(tmp_path, **over)))
        lines = [r.getMessage() for r in caplog.records if "peft's own forward" in r.getMessage()]
        assert bool(lines) == expected, (name, lines)
        if expected:
            assert "6 LoRA layers" in lines[0] and "model.torch_compile=false" in lines[0]
