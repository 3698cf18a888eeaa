"""Next-token sampling as pure tensor functions (no host syncs, so they can run inside a CUDA
graph): the order and semantics of transformers' sampling warpers.

    scaled   = logits / T                                   (T = temperature)
    top-k:     keep the k largest scaled logits             (k = 0: off)
    top-p:     keep the smallest set of most likely tokens whose probability mass reaches p,
               computed on the top-k survivors             (p = 1: off)
    sample   = argmax_i  p_i / E_i,   E_i ~ Exp(1) i.i.d.   (p = softmax of the kept logits)

The last line is exact sampling from p: P(argmax_i p_i/E_i = j) = p_j ("exponential race", the
Gumbel-max trick in another form), and it needs only elementwise ops and one argmax, unlike
torch.multinomial.

The log-probability reported for a sampled token is log softmax(scaled)[token], over the full
vocabulary: the distribution the actor recomputes for its ratio (top-k/top-p truncation is a
sampling detail the policy gradient does not model), as the `generate` path reports it.
"""

from __future__ import annotations

import torch


def filter_top_k_top_p(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """scaled: (B, V) float logits -> (B, V) with -inf outside the kept set (at least one token kept).

    top-k keeps every token tied with the k-th value (as transformers' TopKLogitsWarper does).
    top-p: sort ascending, cumulative probability c_i; drop tokens with c_i <= 1 - p, i.e. keep the
    most likely tokens whose mass reaches p, the most likely token always kept.
    """
    out = scaled
    if top_k and top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= (1.0 - top_p)
        drop_sorted[..., -1] = False  # the most likely token stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def pick_tokens(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, greedy: bool,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """logits: (B, V) -> (B,) long. greedy: argmax; otherwise one draw per row from the filtered
    softmax(logits / T) (module docstring), with `generator` (None: the default generator of the logits'
    device, which torch.manual_seed makes reproducible)."""
    logits = logits.float()
    if greedy:
        return logits.argmax(dim=-1)
    probs = filter_top_k_top_p(logits / temperature, top_k, top_p).softmax(dim=-1)
    # E = 0 would make 0/0 = NaN for a filtered token, and argmax picks NaN: keep E > 0.
    race = torch.empty_like(probs).exponential_(generator=generator).clamp_(min=torch.finfo(torch.float32).tiny)
    return (probs / race).argmax(dim=-1)


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[token] per row: (B, V), (B,) -> (B,) float32."""
    return torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)


class DrawsFrom:
    """A transformers logits processor that makes the draw itself, from `generator`: the last processor of a
    greedy `generate`, it keeps only the token `pick_tokens` draws from the scores it is given (those of the
    processors before it), so generate's argmax takes that token. transformers samples with the default
    generator and takes none of its own; this gives an engine's draws a generator of their own (the
    asynchronous producer's, verl/trainer/async_experience.py) with the same distribution."""

    def __init__(self, generator: torch.Generator, temperature: float, top_k: int, top_p: float):
        self.generator, self.temperature, self.top_k, self.top_p = generator, temperature, top_k, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if bool((torch.isnan(scores) | torch.isposinf(scores)).any()):  # as torch.multinomial refuses them
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        token = pick_tokens(scores, self.temperature, self.top_k, self.top_p, False, self.generator)
        return torch.full_like(scores, float("-inf")).scatter_(1, token[:, None], 0.0)

