"""Response and prompt lengths of the benchmarks' work, in one place. Pure arithmetic (no torch):

    drawn_length       benchmarks/async_grpo.py --lengths tail:M: a length per prompt from its token ids,
                       imposed per request (max_tokens + ignore_eos). verl only: TRL cannot set max_tokens
                       per request
    prompt_word_count  benchmarks/e2e_grpo.py --lengths realistic: prompt i's words, uniform in
                       [ceil(W / 4), W] from i alone (the same prompts in every process, on every side)
    eos_bias_for_median and the survival arithmetic: e2e_grpo.py --lengths realistic's stops. Both sides
                       pass one EOS logit bias b through their engine's sampling parameters (vLLM's
                       SamplingParams.logit_bias; TRL's generation_kwargs go into the same SamplingParams),
                       so their lengths come from one distribution. b is calibrated from the model's own
                       log-probs of EOS (benchmarks/eos_probe.py), so that the median is MEDIAN_FRACTION of
                       the maximum

The stop arithmetic. Let q_t be the model's probability of EOS at response step t (t = 1, 2, ...). With a
bias b on EOS's logit the engine samples EOS with

    p_t(b) = q_t e^b / (1 - q_t + q_t e^b)

so a response stops at step t (its length t, EOS included) with probability p_t prod_{s<t} (1 - p_s), and
runs to the maximum M when no step before M stops it. Survival S(t) = P(length > t) = prod_{s<=t} (1 - p_s),
averaged over sequences (each its own q_t). The median m solves S(m) = 1/2; the share at the maximum is
S(M - 1). With q constant (a random model's EOS log-prob barely moves with the context), the length is
geometric: S(t) = (1 - p)^t, and a median of M / 4 leaves S(M - 1) ~ 2^-4 = 6.25% of the responses at the
maximum: "a few percent at the maximum", a mean of ~0.34 M, and an engine that still steps M times.
"""

from __future__ import annotations

import math
import random
import zlib
from typing import Sequence

MEDIAN_FRACTION = 0.25  # --lengths realistic: median response = a quarter of max_new_tokens


def drawn_length(prompt_ids, median: int) -> int:
    """The response length of every sample of one prompt under --lengths tail:MEDIAN: 1 prompt in 16
    gets 8 x MEDIAN tokens, the others uniform in [MEDIAN / 2, 3 MEDIAN / 2] (so the median is MEDIAN and
    the longest 8x it, and a batch of 32 prompts has a long one with probability 1 - (15/16)^32 = 0.87).
    Drawn from the prompt's own token ids (crc32, not Python's salted hash): every system, in every
    process, gives a prompt the same length."""
    rng = random.Random(zlib.crc32(b",".join(str(t).encode() for t in prompt_ids)))
    if rng.random() < 1 / 16:
        return 8 * median
    return rng.randint(median // 2, (3 * median) // 2)


def prompt_word_count(i: int, words: int) -> int:
    """Prompt i's word count under --lengths realistic: uniform in [ceil(words / 4), words], from crc32 of i
    (deterministic across processes)."""
    rng = random.Random(zlib.crc32(f"prompt {i}".encode()))
    return rng.randint(max(1, -(-words // 4)), words)


def _logit(log_q: float, bias: float) -> float:
    """logit(p(b)) = logit(q) + b, from log q (q can be 1e-6)."""
    return log_q - math.log1p(-math.exp(log_q)) + bias


def stop_probability(log_q: float, bias: float) -> float:
    """p(b) = q e^b / (1 - q + q e^b)."""
    x = _logit(log_q, bias)
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def log_continue(log_q: float, bias: float) -> float:
    """log(1 - p(b)) = -softplus(logit p(b)), without rounding 1 - p to 0."""
    x = _logit(log_q, bias)
    return -(max(x, 0.0) + math.log1p(math.exp(-abs(x))))


def survival(log_q: Sequence[Sequence[float]], bias: float, t: int) -> float:
    """S(t) = mean over sequences of prod_{s=1..t} (1 - p_s(b)); log_q[k][s - 1] is sequence k's log q_s
    (a sequence's last value stands in for the steps past its end)."""
    total = 0.0
    for seq in log_q:
        log_s = 0.0
        for s in range(t):
            log_s += log_continue(seq[min(s, len(seq) - 1)], bias)
        total += math.exp(log_s)
    return total / len(log_q)


def eos_bias_for_median(log_q: Sequence[Sequence[float]], median: float, lo: float = -20.0,
                        hi: float = 60.0, iterations: int = 60) -> float:
    """The bias b with S(median) = 1/2 (bisection; S falls as b grows). `median` may be fractional: S is
    interpolated in log space between its integer steps."""
    def half_gap(b):
        low = math.floor(median)
        s_low, s_high = survival(log_q, b, low), survival(log_q, b, low + 1)
        frac = median - low
        log_s = (1 - frac) * math.log(max(s_low, 1e-300)) + frac * math.log(max(s_high, 1e-300))
        return log_s - math.log(0.5)

    if half_gap(hi) > 0 or half_gap(lo) < 0:
        raise ValueError(f"no EOS bias in [{lo}, {hi}] gives a median of {median} tokens")
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if half_gap(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


def predicted_lengths(log_q: Sequence[Sequence[float]], bias: float, max_len: int) -> dict:
    """What the bias gives at max_new_tokens max_len: the median length, the mean, the share at the maximum
    (S(M - 1)), from S(t) for t = 0 .. M - 1 (mean = sum_{t=0}^{M-1} S(t))."""
    surv = []
    prods = [0.0] * len(log_q)
    for t in range(max_len):
        surv.append(sum(math.exp(x) for x in prods) / len(log_q))  # S(t)
        for k, seq in enumerate(log_q):
            prods[k] += log_continue(seq[min(t, len(seq) - 1)], bias)
    median = next((t for t in range(1, max_len) if surv[t] <= 0.5 + 1e-9), max_len)  # the bisection's S(m) ~ 1/2
    return dict(median=median, mean=round(sum(surv), 1), at_max_share=round(surv[max_len - 1], 4))


def length_stats(resp_lens: Sequence[int], max_len: int) -> dict:
    """Measured: the median and maximum response length and the share at max_len."""
    ordered = sorted(resp_lens)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return dict(resp_len_median=median, resp_len_max=ordered[-1],
                at_max_share=round(sum(r >= max_len for r in ordered) / n, 4))
