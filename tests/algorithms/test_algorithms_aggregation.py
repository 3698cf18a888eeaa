"""aggregate_loss and the masked helpers: hand-derived values and micro-batch invariance."""

import pytest
import torch

from verl.algorithms.aggregation import LOSS_AGG_MODES, aggregate_loss
from verl.algorithms.masked import count_tokens_and_seqs, masked_mean, masked_var, masked_whiten

# loss rows [1 2 3] and [4 5 6]; mask keeps 1, 2 of row 0 and 4 of row 1
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("seq-mean-token-sum", 3.5),  # ((1 + 2) + 4) / 2 seqs
        ("seq-mean-token-mean", 2.75),  # (3/2 + 4/1) / 2
        ("seq-mean-token-sum-norm", 7 / 6),  # (3/3 + 4/3) / 2 with R_max = R = 3
    ],
)
def test_modes_by_hand(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected, rel=1e-6)


def test_sum_norm_uses_given_max_len():
    # (3/10 + 4/10) / 2 = 0.35
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", max_response_len=10).item() == pytest.approx(0.35)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_empty_rows_and_nan_on_masked_positions(mode):
    # An all-masked row with NaN/Inf values changes nothing: it is not counted as a sequence.
    loss = torch.cat([LOSS, torch.tensor([[float("nan"), float("inf"), 9.0]])])
    mask = torch.cat([MASK, torch.zeros(1, 3)])
    loss[0, 2] = float("nan")  # masked position of a live row
    # The extra row adds exact zeros, but a sum over more elements may group them differently:
    # an ulp of values ~1-4 is within approx's default rel 1e-6.
    assert aggregate_loss(loss, mask, mode).item() == pytest.approx(aggregate_loss(LOSS, MASK, mode).item())


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_all_masked_batch_gives_zero_not_nan(mode):
    loss = torch.randn(3, 4, requires_grad=True)
    out = aggregate_loss(loss, torch.zeros(3, 4), mode)
    assert out.item() == 0.0
    out.backward()
    assert torch.equal(loss.grad, torch.zeros(3, 4))


def test_unknown_mode_raises():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate_loss(LOSS, MASK, "token-sum")


def _random_case(seed, B=8, R=6):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(B, R, generator=g)
    mask = (torch.rand(B, R, generator=g) > 0.3).float()  # interior zeros
    mask[2] = 0.0  # one fully masked sequence
    mask[5, 3:] = 0.0  # a short one
    return loss, mask


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("micro", [1, 3, 8])
def test_micro_batch_invariance(mode, micro):
    # Whole mini-batch at once == sum of micro-batch shares normalised by global counts.
    loss, mask = _random_case(0)
    R = loss.shape[1]
    whole = aggregate_loss(loss, mask, mode, max_response_len=R)
    num_tokens, num_seqs = count_tokens_and_seqs(mask)
    parts = []
    for i in range(0, loss.shape[0], micro):
        lo, mo = loss[i:i + micro], mask[i:i + micro]
        # micro-batches may be padded to a different width: trim trailing all-zero columns
        width = int(mo.any(dim=0).nonzero().max().item()) + 1 if mo.any() else 1
        parts.append(aggregate_loss(lo[:, :width], mo[:, :width], mode, num_tokens=num_tokens,
                                    num_seqs=num_seqs, max_response_len=R))
    # float32 sums of ~30 values ~N(0, 1) grouped differently: an ulp or two of the partial sums,
    # observed <= 3e-8 on results ~0.2-1.2.
    assert torch.stack(parts).sum().item() == pytest.approx(whole.item(), rel=1e-6, abs=1e-7)


def test_micro_batch_without_global_counts_differs():
    # Guard for the test above: own counts per micro-batch (mean of means) is NOT the global mean.
    loss, mask = _random_case(0)
    whole = aggregate_loss(loss, mask, "token-mean")
    own = sum(aggregate_loss(loss[i:i + 1], mask[i:i + 1], "token-mean") for i in range(8)) / 8
    assert abs(own.item() - whole.item()) > 1e-3


def test_count_tokens_and_seqs():
    assert count_tokens_and_seqs(torch.tensor([[1.0, 0, 1], [0, 0, 0], [1, 0, 0]])) == (3.0, 2)


def test_masked_mean_var_whiten_by_hand():
    x = torch.tensor([[1.0, 100.0, 3.0], [5.0, 7.0, -50.0]])
    m = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    # valid 1, 3, 5, 7: mean 4, squared deviations 9 + 1 + 1 + 9 = 20, unbiased var 20/3
    assert masked_mean(x, m).item() == pytest.approx(4.0)
    assert masked_var(x, m).item() == pytest.approx(20 / 3)
    assert masked_var(x, m, unbiased=False).item() == pytest.approx(5.0)
    # per-row means: (1 + 3)/2 = 2, (5 + 7)/2 = 6; an empty row gives 0, not NaN
    assert torch.allclose(masked_mean(x, m, dim=-1), torch.tensor([2.0, 6.0]))
    assert masked_mean(x, torch.zeros_like(m), dim=-1).tolist() == [0.0, 0.0]
    w = masked_whiten(x, m)
    s = (20 / 3) ** 0.5
    expected = torch.tensor([[-3 / s, 0.0, -1 / s], [1 / s, 3 / s, 0.0]])
    assert torch.allclose(w, expected, atol=1e-6)
    # shift_mean=False keeps the mean: (x - 4)/s + 4
    assert torch.allclose(masked_whiten(x, m, shift_mean=False), (expected + 4) * m, atol=1e-6)
