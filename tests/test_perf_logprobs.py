"""Chunked log-probs/entropy == the naive full-logits computation (values and gradients),
and the full [batch, length, vocab] float32 tensor is never built."""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from verl.workers.logprobs import head_log_probs, naive_response_log_probs, response_log_probs


class AllocationTracker(TorchDispatchMode):
    """Records, for every tensor an op creates: the largest one (elements), and the peak of
    live bytes of storages created inside the mode (freed storages are subtracted when
    Python drops them). A CPU stand-in for torch.cuda.max_memory_allocated."""

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.live = 0
        self.peak = 0
        self._seen = set()

    def _free(self, key, nbytes):
        self.live -= nbytes
        self._seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.largest = max(self.largest, t.numel())
                st = t.untyped_storage()
                key = st.data_ptr()
                if key and key not in self._seen:
                    self._seen.add(key)
                    self.live += st.nbytes()
                    weakref.finalize(st, self._free, key, st.nbytes())
                    self.peak = max(self.peak, self.live)
        return out


@pytest.fixture(scope="module")
def model(tiny_qwen2):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_qwen2)


def _batch(vocab, b=3, p=5, r=11, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (b, p + r), generator=gen)
    mask = torch.ones(b, p + r, dtype=torch.long)
    mask[0, :2] = 0
    mask[1, p + 6:] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0) * mask
    return ids, mask, pos, mask[:, p:].float(), r


@pytest.mark.parametrize("temperature,chunk", [(1.0, 4), (0.6, 1024), (1.3, 1)])
def test_chunked_equals_naive_values_and_grads(model, temperature, chunk):
    ids, mask, pos, rmask, r = _batch(model.config.vocab_size)
    gen = torch.Generator().manual_seed(1)
    w_lp = torch.randn(rmask.shape, generator=gen) * rmask  # arbitrary upstream gradients
    w_ent = torch.randn(rmask.shape, generator=gen) * rmask

    def grads(fn):
        model.zero_grad()
        lp, ent = fn()
        ((lp * w_lp).sum() + (ent * w_ent).sum()).backward()
        return lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    lp, ent, g = grads(lambda: response_log_probs(model, ids, mask, pos, r, temperature=temperature,
                                                  chunk_size=chunk))
    lp0, ent0, g0 = grads(lambda: naive_response_log_probs(model, ids, mask, pos, r, temperature=temperature))
    assert torch.allclose(lp * rmask, lp0 * rmask, atol=5e-5)  # float32 rounding of values ~1-10
    assert torch.allclose(ent * rmask, ent0 * rmask, atol=5e-5)
    for name in g0:
        assert torch.allclose(g[name], g0[name], atol=1e-5 * float(g0[name].abs().max()), rtol=1e-4), name


def test_head_gradients_match_autograd_with_bias_and_bf16_autocast():
    """The closed-form backward against autograd through log_softmax, for a head with a bias,
    and under bf16 autocast (logits in bf16, reductions in float32)."""
    gen = torch.Generator().manual_seed(0)
    n, h, v = 13, 8, 50
    hidden = torch.randn(n, h, generator=gen, requires_grad=True)
    head = torch.nn.Linear(h, v)
    targets = torch.randint(0, v, (n,), generator=gen)
    g_lp, g_ent = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            lp, ent = head_log_probs(hidden, head, targets, temperature=0.7, chunk_size=5)
        got = torch.autograd.grad((lp * g_lp).sum() + (ent * g_ent).sum(), (hidden, head.weight, head.bias))
        dt = torch.bfloat16 if autocast else torch.float32
        z = torch.nn.functional.linear(hidden.to(dt), head.weight.to(dt), head.bias.to(dt)).float() / 0.7
        logp_all = torch.log_softmax(z, -1)
        lp0 = logp_all.gather(-1, targets[:, None]).squeeze(-1)
        ent0 = -(logp_all.exp() * logp_all).sum(-1)
        want = torch.autograd.grad((lp0 * g_lp).sum() + (ent0 * g_ent).sum(), (hidden, head.weight, head.bias))
        tol = 3e-2 if autocast else 1e-5
        assert torch.allclose(lp, lp0, atol=tol) and torch.allclose(ent, ent0, atol=tol)
        for a, b in zip(got, want):
            assert torch.allclose(a, b, atol=tol * float(b.abs().max()), rtol=tol)


def test_full_logits_never_materialised(model):
    """Forward + backward of the chunked path never creates a tensor of B*R*V elements and
    peaks far lower than the naive path, which must build the float32 (B, R, V) logits."""
    ids, mask, pos, rmask, r = _batch(model.config.vocab_size, b=4, r=32)
    full = ids.shape[0] * r * model.config.vocab_size

    def measure(fn):
        model.zero_grad()
        with AllocationTracker() as tracker:
            lp, ent = fn()
            ((lp + ent) * rmask).sum().backward()
        return tracker

    chunked = measure(lambda: response_log_probs(model, ids, mask, pos, r, chunk_size=16))
    naive = measure(lambda: naive_response_log_probs(model, ids, mask, pos, r))
    biggest_param = max(p.numel() for p in model.parameters())
    assert naive.largest >= full
    # Nothing larger than a weight matrix or one 16-token chunk of logits (vs 4 x 32 tokens).
    assert chunked.largest <= max(biggest_param, 16 * model.config.vocab_size) < full
    assert chunked.peak < naive.peak
    logits_bytes = 4 * full
    assert naive.peak - chunked.peak > logits_bytes  # at least one full fp32 logits tensor saved
