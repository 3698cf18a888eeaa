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


def _head_problem(n=13, h=8, v=50, bias=True, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=gen).to(device).requires_grad_()
    head = torch.nn.Linear(h, v, bias=bias).to(device)
    targets = torch.randint(0, v, (n,), generator=gen).to(device)
    g_lp, g_ent = torch.randn(n, generator=gen).to(device), torch.randn(n, generator=gen).to(device)
    return hidden, head, targets, g_lp, g_ent


def _head_grads(hidden, head, targets, g_lp, g_ent, autocast=False, **kw):
    with torch.autocast(hidden.device.type, dtype=torch.bfloat16, enabled=autocast):
        lp, ent = head_log_probs(hidden, head, targets, temperature=0.7, chunk_size=5, **kw)
    params = (hidden, head.weight) + ((head.bias,) if head.bias is not None else ())
    return (lp, ent) + torch.autograd.grad((lp * g_lp).sum() + (ent * g_ent).sum(), params)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_keep_logits_equals_recompute(autocast, bias, device):
    """training.logprob_keep_logits: values equal (CPU: bit-identical, same logits and per-chunk
    math; CUDA: cuBLAS picks other kernels for 300 rows than for 5, so the logits differ by
    rounding: float32 1e-5, bf16 one bf16 step of logits ~4 -> 2e-2); gradients equal up to
    summation order (one matmul over all rows instead of a float32 sum of per-chunk matmuls):
    float32 1e-6 (TF32 is off by default), bf16 within a bf16 rounding (2^-8) of the largest."""
    prob = _head_problem(n=300, h=64, v=1000, bias=bias, device=device)
    got = _head_grads(*prob, autocast=autocast, keep_logits=True)
    want = _head_grads(*prob, autocast=autocast, keep_logits=False)
    if device == "cpu":
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    else:
        atol = 2e-2 if autocast else 1e-5
        assert torch.allclose(got[0], want[0], atol=atol) and torch.allclose(got[1], want[1], atol=atol)
    tol = 2 ** -7 if autocast else 1e-6
    for a, b in zip(got[2:], want[2:]):
        assert a.dtype == b.dtype
        assert torch.allclose(a, b, atol=tol * float(b.abs().max()), rtol=tol)


def test_keep_logits_memory_and_single_backward():
    """Keep mode holds one (N, V) logits tensor in the matmul dtype (created once, never in
    float32); a no-grad call keeps nothing; a second backward through kept logits is refused."""
    n, v = 40, 300
    hidden, head, targets, g_lp, g_ent = _head_problem(n=n, v=v)
    with AllocationTracker() as tracker, torch.autocast("cpu", dtype=torch.bfloat16):
        lp, ent = head_log_probs(hidden, head, targets, chunk_size=8, keep_logits=True)
    assert tracker.largest == n * v  # the bf16 logits; the float32 math ran on 8-row chunks
    loss = (lp * g_lp).sum() + (ent * g_ent).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="logprob_keep_logits"):
        loss.backward()
    with torch.no_grad(), AllocationTracker() as tracker:
        head_log_probs(hidden, head, targets, chunk_size=8, keep_logits=True)
    assert tracker.largest < n * v


def test_cpu_row_blocks_change_nothing(monkeypatch):
    """The CPU runs the float32 softmax math in cache-sized row blocks: blocks of 1 row give
    bit-identical values and gradients to whole chunks (every op is row-wise)."""
    import verl.workers.logprobs as lp_mod

    prob = _head_problem(n=17)
    for keep in (False, True):
        monkeypatch.setattr(lp_mod, "CPU_MATH_BYTES", 1 << 40)  # whole 5-row chunks
        whole = _head_grads(*prob, keep_logits=keep)
        monkeypatch.setattr(lp_mod, "CPU_MATH_BYTES", 1)  # one row per pass
        rows = _head_grads(*prob, keep_logits=keep)
        for a, b in zip(rows, whole):
            assert torch.equal(a, b)


def test_trainer_step_keep_logits_equals_recompute(tmp_path, monkeypatch, tiny_gpt2):
    """A PPO step (entropy bonus, KL loss) with training.logprob_keep_logits: the same metrics
    and first actor gradients as the default recomputing head (float32: summation order only)."""
    import math

    from conftest import capture_first_grads, small_overrides
    from verl import create_trainer, load_config

    def step(tag, keep):
        captured = capture_first_grads(monkeypatch)
        over = {"training.batch_size": 4, "training.micro_batch_size": 2, "training.total_steps": 1,
                "rollout.max_new_tokens": 12, "checkpoint.save_dir": str(tmp_path / tag), "algorithm.name": "ppo",
                "algorithm.use_kl_loss": "true", "algorithm.kl_loss_coef": 0.1, "algorithm.entropy_coeff": 0.01,
                "training.logprob_chunk_size": 5, "training.logprob_keep_logits": keep}
        metrics = create_trainer(load_config(None, small_overrides(tmp_path, **over))).step()
        return captured["actor"], metrics

    g0, m0 = step("recompute", "false")
    g1, m1 = step("keep", "true")
    for key in ("actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/grad_norm"):
        assert math.isclose(m0[key], m1[key], rel_tol=1e-5, abs_tol=1e-7), key
    assert len(g0) == len(g1) > 0
    for a, b in zip(g0, g1):
        assert torch.allclose(a, b, atol=1e-5 * float(a.abs().max()), rtol=1e-4)
