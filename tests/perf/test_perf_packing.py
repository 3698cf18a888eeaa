"""Sequence packing: the packed (padding-free) forward gives the padded forward's log-probs,
values and gradients, on tiny GPT-2 / Llama / Qwen2, with each attention method."""

import math

import pytest
import torch

from conftest import capture_first_grads, small_overrides
from verl import create_trainer, load_config
from verl.workers.logprobs import response_log_probs
from verl.workers.micro_batches import make_micro_batches
from verl.workers.packing import PackingUnsupported, causal_lm_trunk, pack_batch, prepare_packing


def _rollout_like_batch(vocab: int, seed: int = 0):
    """(input_ids, attention_mask, position_ids, response_mask) with left-padded prompts and
    right-padded responses of very different lengths (the rollout layout), P=6, R=9."""
    gen = torch.Generator().manual_seed(seed)
    b, p, r = 5, 6, 9
    prompt_len = [6, 2, 4, 1, 5]
    resp_len = [9, 1, 4, 7, 2]
    ids = torch.randint(3, vocab, (b, p + r), generator=gen)
    mask = torch.zeros(b, p + r, dtype=torch.long)
    for i in range(b):
        mask[i, p - prompt_len[i]: p + resp_len[i]] = 1
    ids = ids * mask  # pad id 0 on padding
    pos = (mask.cumsum(1) - 1).clamp(min=0) * mask
    return ids, mask, pos, mask[:, p:].float(), r


def test_pack_batch_layout_by_hand():
    # Two sequences: prompt [a b] + response [c], prompt [d] + response [e f]; P=2, R=2.
    ids = torch.tensor([[11, 12, 13, 0], [0, 21, 22, 23]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]])
    pk = pack_batch(ids, mask, response_length=2)
    assert pk.input_ids.tolist() == [[11, 12, 13, 21, 22, 23]]
    assert pk.position_ids.tolist() == [[0, 1, 2, 0, 1, 2]]
    assert pk.cu_seqlens.tolist() == [0, 3, 6] and pk.max_seqlen == 3
    # Response tokens 13 (row 0, col 0), 22 and 23 (row 1, cols 0-1), predicted by the token before each.
    assert pk.rows.tolist() == [0, 1, 1] and pk.cols.tolist() == [0, 0, 1]
    assert pk.target_ids.tolist() == [13, 22, 23]
    assert pk.pred_index.tolist() == [1, 3, 4]
    assert pk.unpack(torch.tensor([1.0, 2.0, 3.0])).tolist() == [[1.0, 0.0], [2.0, 3.0]]


@pytest.mark.parametrize("mode", ["attention", "mask"])
@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_packed_log_probs_equal_padded(arch, mode, monkeypatch, request):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("VERL_PACKED_ATTENTION", mode)
    model = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(f"tiny_{arch}"), attn_implementation="sdpa")
    assert prepare_packing(causal_lm_trunk(model)) == mode
    ids, mask, pos, rmask, r = _rollout_like_batch(model.config.vocab_size)

    def run(packed):
        model.zero_grad()
        lp, ent = response_log_probs(model, ids, mask, pos, r, temperature=0.8, chunk_size=7, packed=packed)
        ((lp * rmask).sum() + 0.1 * (ent * rmask).sum()).backward()
        return lp, ent, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    lp_pad, ent_pad, g_pad = run(False)
    lp_pk, ent_pk, g_pk = run(True)
    # Two paths: one packed row (varlen attention or a block-diagonal mask) vs padded rows.
    # float32 log p in [-15, 0]: observed <= 7e-7, atol 2e-5. H = lse - sum p z cancels terms up
    # to max|z|/T (~14-20, where an ulp is 1-2e-6): observed <= 9e-6 (tiny models built on
    # other machines differ), atol 5e-5 as in test_perf_logprobs. A sequence attending into its
    # neighbour moves both by > 1e-2.
    assert torch.allclose(lp_pk * rmask, lp_pad * rmask, atol=2e-5), (lp_pk - lp_pad).abs().max()
    assert torch.allclose(ent_pk * rmask, ent_pad * rmask, atol=5e-5)
    assert (lp_pk[rmask == 0] == 0).all()  # padding comes back as zeros
    assert g_pad.keys() == g_pk.keys()
    # Gradients: a bias's is a sum over all 75 tokens whose terms cancel (qwen2 k_proj.bias:
    # sum |terms| = 16 x |result|); in another order that is ~sqrt(75) float32 ulps of the terms:
    # observed <= 6.7e-6 of the tensor's largest element (1 and 2 threads, AVX2 and the default
    # ISA; the worst case 74 * 2^-24 * 16 = 7e-5). atol 2e-5 of the largest, rtol 1e-4.
    for name in g_pad:
        scale = float(g_pad[name].abs().max())
        assert torch.allclose(g_pk[name], g_pad[name], atol=2e-5 * scale, rtol=1e-4), name
    # The model still generates normally (packing only changes calls that carry its metadata).
    out = model.generate(input_ids=ids[:2, :6], attention_mask=mask[:2, :6], max_new_tokens=3, do_sample=False)
    assert out.shape == (2, 9)


def test_bidirectional_backbone_is_refused():
    from transformers import BertConfig, BertModel

    trunk = BertModel(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32))
    with pytest.raises(PackingUnsupported, match="use_packed_samples"):
        prepare_packing(trunk)


def test_token_budget_bounds_packed_row_and_padded_block():
    from verl.batch import Batch

    ids, mask, pos, rmask, r = _rollout_like_batch(100)
    batch = Batch(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -r:], response_mask=rmask)
    lengths = mask.sum(1).tolist()  # [15, 3, 8, 8, 7]
    packed = make_micro_batches(batch, 2, max_tokens=16, packed=True)
    assert [len(m) for m in packed] == [1, 2, 2]  # [15] [3+8] [8+7]
    assert sum(len(m) for m in packed) == len(batch)
    for mb in packed:
        n = int(mb.attention_mask.sum())
        assert n <= 16 or len(mb) == 1
        assert pack_batch(mb.input_ids, mb.attention_mask, r).num_tokens == n
    rows = torch.cat([m.input_ids for m in packed])
    assert torch.equal(rows, ids)  # row order kept
    padded = make_micro_batches(batch, 2, max_tokens=16, packed=False)
    for mb in padded:
        p = mb.prompt_length
        block = len(mb) * int(mb.attention_mask[:, :p].sum(1).max() + mb.attention_mask[:, p:].sum(1).max())
        assert block <= 16 or len(mb) == 1
    assert sum(lengths) == int(mask.sum())


def _grads_after_one_step(tmp_path, monkeypatch, tag, extra):
    captured = capture_first_grads(monkeypatch)
    over = {"training.batch_size": 4, "training.micro_batch_size": 2, "training.total_steps": 1,
            "rollout.max_new_tokens": 12, "checkpoint.save_dir": str(tmp_path / tag), "algorithm.name": "ppo",
            "algorithm.use_kl_loss": "true", "algorithm.kl_loss_coef": 0.1, "algorithm.entropy_coeff": 0.01}
    over.update(extra)
    trainer = create_trainer(load_config(None, small_overrides(tmp_path, **over)))
    metrics = trainer.step()
    return captured, metrics


@pytest.mark.parametrize("critic", [{}, {"critic.share_actor": "true"}], ids=["own_critic", "shared_critic"])
def test_trainer_step_packed_equals_padded(tmp_path, monkeypatch, tiny_gpt2, critic):
    """Actor, reference and critic all packed (PPO with a critic, KL loss, entropy bonus):
    the same gradients and metrics as the padded step, also with a token budget."""
    pad, m_pad = _grads_after_one_step(tmp_path, monkeypatch, "pad", dict(critic))
    pk, m_pk = _grads_after_one_step(tmp_path, monkeypatch, "pk", {"training.use_packed_samples": "true",
                                                                  "training.max_tokens_per_micro_batch": 30,
                                                                  **critic})
    # float32, packed vs padded as above: metrics O(1) within 1e-4 (observed 1e-7 relative);
    # gradients within 1e-5 of each tensor's largest element (observed 1.7e-7 of it).
    for key in ("reward", "kl", "vf_loss", "actor/entropy"):
        assert math.isclose(m_pad[key], m_pk[key], rel_tol=1e-4, abs_tol=1e-6), key
    for role in ("actor", "critic"):
        assert len(pad[role]) == len(pk[role]) > 0
        for i, (a, b) in enumerate(zip(pad[role], pk[role])):
            assert torch.allclose(a, b, atol=1e-5 * float(a.abs().max()), rtol=1e-3), (role, i, (a - b).abs().max())


def test_cpu_low_precision_packed_attention_is_eager_math(monkeypatch):
    """On the CPU in bf16, packed attention runs per-sequence matmuls + float32 softmax: in
    float32 that math equals per-sequence causal SDPA (values and gradients, 1e-5), and the
    attention function in bf16 autocast stays within bf16 rounding of the float32 result."""
    import verl.workers.packing as packing
    from verl.workers.packing import _segments_eager, _segments_sdpa, packed_attention_forward

    gen = torch.Generator().manual_seed(0)
    cu_list = [0, 5, 6, 13]
    hq, hk, d, n = 4, 2, 8, cu_list[-1]
    q = torch.randn(1, hq, n, d, generator=gen, requires_grad=True)
    k = torch.randn(1, hk, n, d, generator=gen, requires_grad=True)
    v = torch.randn(1, hk, n, d, generator=gen, requires_grad=True)
    g = torch.randn(1, n, hq, d, generator=gen)

    def run(fn):
        kr, vr = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
        out = fn(q, kr, vr, cu_list, d ** -0.5, 0.0)
        return (out,) + torch.autograd.grad((out * g).sum(), (q, k, v))

    # float32, per-sequence matmuls + softmax vs SDPA's kernel: a few ulps of outputs and
    # gradients of order 1 (q, k, v ~ N(0, 1), 8-dim heads): observed <= 5e-7. atol 1e-5.
    for a, b in zip(run(_segments_eager), run(_segments_sdpa)):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    want = run(_segments_sdpa)[0]
    cu = torch.tensor(cu_list, dtype=torch.int32)
    calls = []
    monkeypatch.setattr(packing, "_segments_eager", lambda *a: calls.append(1) or _segments_eager(*a))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = packed_attention_forward(None, q.bfloat16(), k.bfloat16(), v.bfloat16(), None,
                                          cu_seq_lens_q=cu, max_length_q=7)
    # bf16 inputs, matmuls and output (2^-8 relative per rounding) of outputs |o| < 4 (averages
    # of v ~ N(0, 1)): observed <= 1e-2. atol 3e-2.
    assert calls and got.dtype == torch.bfloat16 and torch.allclose(got.float(), want, atol=3e-2)


def test_packing_by_default_falls_back_to_padded_where_the_model_cannot_pack(capsys):
    """training.use_packed_samples: auto on a GPU asks every worker for packing; a model that cannot
    be packed then runs padded with one line naming the role, while an explicit `true` keeps the error."""
    from transformers import BertConfig, BertModel

    from verl.workers.micro_batches import MicroBatching

    trunk = BertModel(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32))
    mode, micro = MicroBatching(4, None, True, packed_by_default=True).with_packing(trunk, "critic")
    assert mode is None and micro == MicroBatching(4, None, False, packed_by_default=True)
    assert "verl: critic runs padded micro-batches: training.use_packed_samples" in capsys.readouterr().out
    with pytest.raises(PackingUnsupported, match="use_packed_samples"):
        MicroBatching(4, None, True).with_packing(trunk, "critic")
    assert MicroBatching(4).with_packing(trunk, "critic") == (None, MicroBatching(4))  # padded: nothing asked
