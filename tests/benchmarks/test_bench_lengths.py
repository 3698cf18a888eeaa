"""benchmarks/lengths.py: the EOS-bias arithmetic of e2e_grpo.py --lengths realistic against closed forms, the
varied prompt lengths, and the measured length summary."""

from __future__ import annotations

import math
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import lengths  # noqa: E402


def test_stop_probability_adds_the_bias_in_logit_space():
    log_q = math.log(1e-4)
    # p = q e^b / (1 - q + q e^b): b = 0 gives q back; b = ln(9999) gives 1e-4 * 9999 / (0.9999 + 0.9999) = 1/2
    assert lengths.stop_probability(log_q, 0.0) == pytest.approx(1e-4)
    assert lengths.stop_probability(log_q, math.log(9999)) == pytest.approx(0.5)
    assert lengths.log_continue(log_q, 80.0) < -70  # 1 - p ~ e^-70.8, not rounded to log(0)


def test_constant_q_gives_the_geometric_closed_form():
    # q constant: S(t) = (1 - p)^t; S(4) = 1/2 -> p = 1 - 2^(-1/4) = 0.159104; b = logit(p) - logit(q)
    log_q = math.log(1e-4)
    p = 1 - 2 ** -0.25
    expected = math.log(p / (1 - p)) - math.log(1e-4 / (1 - 1e-4))  # 7.5433
    seqs = [[log_q] * 16] * 3
    b = lengths.eos_bias_for_median(seqs, 4)
    assert b == pytest.approx(expected, abs=1e-6)
    assert lengths.survival(seqs, b, 4) == pytest.approx(0.5)
    got = lengths.predicted_lengths(seqs, b, 16)
    # at the maximum: S(15) = 2^(-15/4) = 0.0743; mean = sum_{t<16} (1-p)^t = (1 - 2^-4) / p = 5.892
    assert got == dict(median=4, mean=5.9, at_max_share=pytest.approx(0.0743, abs=1e-4))
    # a median of M / 4 at M = 512: 2^(-511/128) = 6.3% at the maximum, "a few percent"
    assert lengths.predicted_lengths([[log_q]], lengths.eos_bias_for_median([[log_q]], 128), 512)["at_max_share"] \
        == pytest.approx(2 ** (-511 / 128), abs=1e-4)


def test_mixed_sequences_solve_the_mean_survival():
    # two sequences, q = 1e-3 and 1e-5: the bias puts the MEAN of their survivals at 1/2, not each one's
    seqs = [[math.log(1e-3)] * 8, [math.log(1e-5)] * 8]
    b = lengths.eos_bias_for_median(seqs, 2)
    each = [math.exp(2 * lengths.log_continue(s[0], b)) for s in seqs]
    assert (each[0] + each[1]) / 2 == pytest.approx(0.5) and each[0] < 0.5 < each[1]
    with pytest.raises(ValueError, match="no EOS bias"):
        lengths.eos_bias_for_median(seqs, 2, lo=-20.0, hi=-10.0)


def test_prompt_word_counts_are_uniform_in_a_quarter_to_all():
    counts = [lengths.prompt_word_count(i, 64) for i in range(2000)]
    assert counts == [lengths.prompt_word_count(i, 64) for i in range(2000)]  # a function of i alone
    assert min(counts) == 16 and max(counts) == 64
    assert 35 < sum(counts) / len(counts) < 45  # uniform mean 40
    assert lengths.prompt_word_count(7, 1) == 1 and lengths.prompt_word_count(3, 5) in range(2, 6)  # ceil(5/4) = 2


def test_length_stats():
    assert lengths.length_stats([1, 3, 16, 16, 2], 16) == dict(resp_len_median=3, resp_len_max=16, at_max_share=0.4)
    assert lengths.length_stats([4, 2], 16)["resp_len_median"] == 3
