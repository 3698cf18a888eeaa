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
    # Two paths: per-chunk head matmuls + our lse/entropy formulas vs one (B*R, V) product +
    # log_softmax. float32 log p in [-24, 0]; H = lse - sum p z cancels two terms of size
    # max|z|/T (up to 19 at T = 0.6, where 2^-20 ~ 1e-6 is one ulp): observed <= 1.9e-6 on log p,
    # <= 1.9e-5 on H. atol 5e-5 (a wrong target or mask moves them by > 1e-2).
    assert torch.allclose(lp * rmask, lp0 * rmask, atol=5e-5)
    assert torch.allclose(ent * rmask, ent0 * rmask, atol=5e-5)
    # Gradients, float32: the log-prob part differs by summation order only (observed <= 3e-6 of
    # each tensor's largest element). The entropy's, -p_k (log p_k + H) / T per logit, carries
    # the rounding of log p_k (down to -24 at T = 0.6, where an ulp is 2e-6) against factors of
    # order 1, and the trunk's backward sums such terms with cancellation (a bias's terms add up
    # to ~16x its gradient): observed <= 2.1e-5 of the largest element at T = 0.6. atol 1e-4 of
    # the largest, rtol 1e-4; a wrong or missing term moves gradients by > 1e-2 of it.
    for name in g0:
        assert torch.allclose(g[name], g0[name], atol=1e-4 * float(g0[name].abs().max()), rtol=1e-4), name


def test_head_gradients_match_autograd_with_bias_and_bf16_autocast():
    """The closed-form backward against autograd through log_softmax, for a head with a bias,
    and under bf16 autocast (logits in bf16, reductions in float32). Two computation paths
    (chunks of 5 rows vs one 13-row matmul; closed form vs autograd's ops):
      float32: values ~4 (log 50) and entropy formulas in another order: a few ulps (2^-22 at
        4, observed <= 1.2e-6); gradients within 1e-5 of the largest (observed <= 3e-7). tol 1e-5.
      bf16: a logit (|z| < 2 here) that rounds to the other bf16 neighbour in one path moves by
        one bf16 step 2^-7, 0.011 after T = 0.7: log p by up to twice that (z_y and lse), p_k and
        the gradient terms built from it by ~1.1%; the gradients also pass through bf16 roundings
        of dz and of the products (2^-9 each, observed 2e-3 of the largest). tol 3e-2."""
    gen = torch.Generator().manual_seed(0)
    n, h, v = 13, 8, 50
    hidden = torch.randn(n, h, generator=gen, requires_grad=True)
    with torch.random.fork_rng(devices=[]):  # a seeded head, whatever ran before
        torch.manual_seed(0)
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
    with torch.random.fork_rng(devices=[]):  # the head's init is seeded too, without touching the global RNG
        torch.manual_seed(seed)
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
    """training.logprob_keep_logits: the kept path forms the logits in one (300, 64) x (64, 1000)
    matmul, the recomputing path in 60 matmuls of 5 rows; the backward is one matmul over all rows
    against a float32 sum of per-chunk matmuls. Two computation paths, so no bitwise equality:
    oneDNN/MKL on the CPU and cuBLAS on the GPU block a matmul by its shape, ISA and thread count
    (here, 2 threads already change the 300-row product's bits; 1 thread happens not to).

    Values (log p ~ -7, entropy ~ 7; logits |z| < 4 after T = 0.7):
      float32: each logit is a K=64 dot product (|h| ~ 1, |w| <= 1/8) whose two blockings differ
        by a few float32 ulps of |z| (2^-24 relative; worst case 64 * 2^-24 * sum|h w| ~ 1e-5);
        log p = z_y - lse and H move by about as much, plus their own rounding: 1 ulp of 8 is
        1e-6. atol 1e-5 (the observed differences are 1e-6 to 1.5e-6).
      bf16: the logits are rounded to bf16, so a float32 difference that crosses a rounding
        boundary moves a logit by one bf16 step (2^-6 below 4), 0.022 after T = 0.7. atol 3e-2.
    Gradients (relative to the largest element of each tensor, atol and rtol alike):
      float32: dL/dh is a K=1000 (vocabulary) dot product, dL/dW a sum over 300 rows, each in
        another order: ~sqrt(K) * 2^-24 ~ 2e-6 of the magnitudes summed (observed up to 1.5e-6).
        tol 1e-5, far below what a bug moves (a missing entropy term or wrong target: > 1e-2).
      bf16: the recomputing path rounds 60 per-chunk products to bf16 (2^-9 relative) before
        summing them in float32, the kept one rounds the final product once: a random walk of
        60 roundings of partial sums ~ |final| / sqrt(60) gives ~2^-9 / sqrt(3) ~ 1e-3 of the
        largest element per element, 5e-3 at the tail of 64k elements (observed 3e-3 to 5e-3);
        the worst case sqrt(60) * 2^-9 = 1.5e-2 is atol + rtol at the largest element. tol 2^-7."""
    prob = _head_problem(n=300, h=64, v=1000, bias=bias, device=device)
    got = _head_grads(*prob, autocast=autocast, keep_logits=True)
    want = _head_grads(*prob, autocast=autocast, keep_logits=False)
    atol = 3e-2 if autocast else 1e-5
    assert torch.allclose(got[0], want[0], atol=atol, rtol=0), (got[0] - want[0]).abs().max()
    assert torch.allclose(got[1], want[1], atol=atol, rtol=0), (got[1] - want[1]).abs().max()
    tol = 2 ** -7 if autocast else 1e-5
    for a, b in zip(got[2:], want[2:]):
        assert a.dtype == b.dtype
        assert torch.allclose(a, b, atol=tol * float(b.abs().max()), rtol=tol), (a - b).abs().max() / b.abs().max()


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
    and first actor gradients as the default recomputing head (float32: summation order only,
    as in test_keep_logits_equals_recompute: log-probs within ~1.5e-6). Entropy and grad norm
    are O(1): rel 1e-5. pg_loss and kl_loss are ~0 at the first step (ratio ~1 with whitened
    advantages, actor == reference), so they carry only the per-token log-prob difference of
    the two head paths weighted by |A| ~ 1: abs 1e-6 (observed <= 5e-8)."""
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
        assert math.isclose(m0[key], m1[key], rel_tol=1e-5, abs_tol=1e-6), key
    assert len(g0) == len(g1) > 0
    for a, b in zip(g0, g1):
        assert torch.allclose(a, b, atol=1e-5 * float(a.abs().max()), rtol=1e-4)


def test_head_sum_pi_squared_matches_the_full_softmax():
    # sum_v softmax(z / T)_v^2 from the full (N, V) logits, against the chunked head pass (chunks of 3 rows)
    from verl.workers.logprobs import head_sum_pi_squared

    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11)
    hidden = torch.randn(7, 8)
    want = torch.softmax(head(hidden) / 0.7, dim=-1).pow(2).sum(-1)
    got = head_sum_pi_squared(hidden, head, temperature=0.7, chunk_size=3)
    assert torch.allclose(got, want, atol=1e-6)
    # a uniform distribution (all logits equal) has squared norm 1/V
    uniform = torch.nn.Linear(8, 11, bias=False)
    torch.nn.init.zeros_(uniform.weight)
    assert torch.allclose(head_sum_pi_squared(torch.randn(2, 8), uniform), torch.full((2,), 1 / 11))
