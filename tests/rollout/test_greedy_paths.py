"""greedy_paths on hand-made rollouts: assert_greedy_agree passes equal rows and near ties and
fails a divergence that is not a tie and log-probs that disagree; min_top2_gap reads the
smallest top-2 logit gap over the response positions only."""

import math

import pytest
import torch

from greedy_paths import assert_greedy_agree, min_top2_gap
from verl.batch import Batch

V = 4
PROMPT = torch.tensor([[0, 1]])  # one row, prompt width 2, no padding


def rollout(tokens, log_probs):
    r = len(tokens)
    responses = torch.tensor([tokens])
    return Batch(input_ids=torch.cat([PROMPT, responses], 1), attention_mask=torch.ones(1, 2 + r, dtype=torch.long),
                 responses=responses, response_mask=torch.ones(1, r), rollout_log_probs=torch.tensor([log_probs]))


def forward_with(logits):
    """A stand-in model: the same next-token logits (V,) whatever the context."""
    return lambda ids, mask: torch.tensor([logits])


# log-probs of tokens 2 and 3 under logits [0, 0, 1, 1 - gap]
def lp(gap, token):
    z = torch.tensor([0.0, 0.0, 1.0, 1.0 - gap])
    return float(torch.log_softmax(z, -1)[token])


def test_equal_rows_compare_every_token():
    a = rollout([2, 2, 3], [-1.0, -0.5, -0.25])
    assert assert_greedy_agree(forward_with([0.0] * V), a, a, lp_tol=0.0, forward_tol=0.0) == 3


def test_log_probs_beyond_lp_tol_fail():
    with pytest.raises(AssertionError, match="token 1: log-probs"):
        assert_greedy_agree(forward_with([0.0] * V), rollout([2, 2], [-1.0, -0.5]), rollout([2, 2], [-1.0, -0.6]),
                            lp_tol=0.05, forward_tol=0.05)


def test_divergence_at_a_near_tie_passes_and_stops_there():
    gap = 0.01  # tokens 2 and 3 within 0.01: a rounding difference can swap them
    got = rollout([2, 2, 3, 0], [-1.0, lp(gap, 2), -9.0, -9.0])
    want = rollout([2, 3, 1], [-1.0, lp(gap, 3), -0.1])  # what follows is not compared
    fwd = forward_with([0.0, 0.0, 1.0, 1.0 - gap])
    assert assert_greedy_agree(fwd, got, want, lp_tol=1e-6, forward_tol=0.01, min_compared=0.3) == 1
    with pytest.raises(AssertionError, match="only 1 of 3 tokens compared"):  # too little left to compare
        assert_greedy_agree(fwd, got, want, lp_tol=1e-6, forward_tol=0.01, min_compared=0.5)


def test_divergence_without_a_tie_fails():
    gap = 0.5  # token 3 is 0.5 below token 2: no rounding explains choosing it
    fwd = forward_with([0.0, 0.0, 1.0, 1.0 - gap])
    got, want = rollout([2, 2], [-1.0, lp(gap, 2)]), rollout([2, 3], [-1.0, lp(gap, 3)])
    with pytest.raises(AssertionError, match="not a rounding difference"):
        assert_greedy_agree(fwd, got, want, lp_tol=0.05, forward_tol=0.05)


def test_divergence_with_a_wrong_engine_log_prob_fails():
    gap = 0.01
    fwd = forward_with([0.0, 0.0, 1.0, 1.0 - gap])
    got, want = rollout([2, 2], [-1.0, lp(gap, 2)]), rollout([2, 3], [-1.0, lp(gap, 3) - 0.2])
    with pytest.raises(AssertionError, match="want's log-prob"):
        assert_greedy_agree(fwd, got, want, lp_tol=0.05, forward_tol=0.05)
    assert math.isclose(lp(gap, 2) - lp(gap, 3), gap, rel_tol=1e-5)


class FixedLogits(torch.nn.Module):
    """A stand-in causal LM: logits (B, T, V) given at construction, whatever the input."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.as_tensor(logits, dtype=torch.float32), requires_grad=False)

    def forward(self, input_ids, attention_mask, position_ids):
        return type("Out", (), {"logits": self.logits.expand(input_ids.shape[0], -1, -1)})()


def test_min_top2_gap_reads_response_positions_only():
    # prompt width 2, responses of 2 (the second masked): positions 1 and 2 predict them
    logits = [[[0.0, 5.0, 0.0, 0.0],    # position 0: no response token
               [0.0, 1.0, 0.7, 0.0],    # predicts response token 0: gap 0.3
               [0.0, 2.0, 1.99, 0.0],   # predicts response token 1 (masked): gap 0.01, ignored
               [9.0, 9.0, 0.0, 0.0]]]   # after the last response token: a tie, ignored
    batch = rollout([1, 1], [-1.0, -1.0])
    batch.position_ids = torch.arange(4)[None]
    batch.response_mask[0, 1] = 0.0
    assert math.isclose(min_top2_gap(FixedLogits(logits), batch), 0.3, rel_tol=1e-6)
