"""Importance weights between the behaviour policy and pi_old, against values derived by hand."""

import math

import pytest
import torch

from verl.algorithms.off_policy import importance_weights


def test_truncated_and_masked_weights_by_hand():
    # ratios exp(old - behaviour): e^0 = 1, e^ln3 = 3, e^-ln4 = 0.25, and a masked token
    old = torch.tensor([[0.0, math.log(3.0), -math.log(4.0), 5.0]])
    behaviour = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w, stats = importance_weights(old, behaviour, mask, "truncate", cap=2.0)
    # truncate at 2: 1, min(3, 2) = 2, 0.25 (the masked token's weight is irrelevant)
    assert torch.allclose(w[0, :3], torch.tensor([1.0, 2.0, 0.25]))
    assert stats["changed_frac"] == pytest.approx(1 / 3)  # one of three counted tokens was capped
    assert stats["ratio_mean"] == pytest.approx((1 + 3 + 0.25) / 3)
    assert (stats["ratio_max"], stats["ratio_min"]) == (pytest.approx(3.0), pytest.approx(0.25))
    w, stats = importance_weights(old, behaviour, mask, "mask", cap=2.0)
    # mask outside [1/2, 2]: keep 1, drop 3, drop 0.25
    assert w[0, :3].tolist() == [1.0, 0.0, 0.0] and stats["changed_frac"] == pytest.approx(2 / 3)


def test_equal_policies_give_weight_one():
    lp = torch.randn(3, 5)
    w, stats = importance_weights(lp, lp.clone(), torch.ones(3, 5), "truncate", 1.5)
    assert torch.equal(w, torch.ones(3, 5)) and stats["changed_frac"] == 0.0
    with pytest.raises(ValueError, match="not one of"):
        importance_weights(lp, lp, torch.ones(3, 5), "clip")
