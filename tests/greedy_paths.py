"""Greedy rollouts from two computation paths: the same tokens, except after a near tie.

Two paths that compute the same logits differently (another attention window, cache layout,
batch composition or kernel) differ by rounding. Greedy decoding turns that into a different
token only where the two largest logits are closer than the rounding difference, and from there
on the two continuations share nothing. So a bitwise comparison of the tokens holds on one
machine and fails on another (other matmul blockings, other tiny-model weights: they are
pretrained locally). `assert_greedy_agree` compares row by row instead:

  * up to the first differing token, the tokens are equal and the engines' log-probs agree
    within `lp_tol` (the test's tolerance for the two paths, justified where it is called);
  * at the first difference, the two tokens must be a near tie: under a teacher-forced forward
    of the reference model over the prompt and the common prefix (a third path, within
    `forward_tol` of either engine), both tokens' log-probs are within 2 * forward_tol of the
    largest, and each engine's log-prob of its own token is within forward_tol of the
    forward's. (If all three agree within t, two argmaxes can differ only between tokens within
    2t of each other: F(b) >= B(b) - t >= B(a) - t >= F(a) - 2t.) The rest of the row is not
    compared: it continues from different text.

A bug in either path (a wrong mask, position or cache slot) changes log-probs by far more than
rounding and picks tokens that are not near-ties, so it still fails; and at least `min_compared`
of the reference's tokens must have been compared, so early divergences in every row fail too.
"""

from __future__ import annotations

import contextlib

import torch


def model_forward(model, autocast_dtype=None):
    """forward(input_ids (B, T), attention_mask (B, T)) -> last-position logits (B, V), float32,
    with position ids counting real tokens (left padding), as the rollout engines use them."""
    device = next(model.parameters()).device

    @torch.no_grad()
    def forward(input_ids, attention_mask):
        ctx = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
        with ctx:
            out = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                        position_ids=position_ids.to(device))
        return out.logits[:, -1].float().cpu()

    return forward


@torch.no_grad()
def min_top2_gap(model, batch) -> float:
    """The smallest gap between the two largest logits over the response positions of a rollout
    Batch, under one teacher-forced forward of `model`: how close greedy decoding of these
    tokens came to a tie. Where it exceeds the paths' logit differences, exact token equality
    between the paths is justified."""
    device = next(model.parameters()).device
    logits = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                   position_ids=batch.position_ids.to(device)).logits.float().cpu()
    p, r = batch.prompt_length, batch.response_length
    top = logits[:, p - 1:p + r - 1].topk(2, dim=-1).values  # (B, R, 2): position p-1+t predicts token t
    gaps = top[..., 0] - top[..., 1]
    return float(gaps[batch.response_mask.bool()].min())


def _rows(batch):
    """Per row: (prompt ids (P,), prompt mask (P,), response tokens [..], engine log-probs [..])."""
    p = batch.prompt_length
    out = []
    for i in range(len(batch)):
        keep = batch.response_mask[i].bool()
        out.append((batch.input_ids[i, :p], batch.attention_mask[i, :p], batch.responses[i][keep].tolist(),
                    batch.rollout_log_probs[i][keep].tolist()))
    return out


def assert_greedy_agree(forward, got, want, lp_tol: float, forward_tol: float, min_compared: float = 0.5) -> int:
    """got, want: rollout Batches of the same prompts (greedy, temperature 1), `want` the reference
    path. forward: see `model_forward`. Returns the number of tokens compared."""
    assert len(got) == len(want) and got.prompt_length == want.prompt_length
    compared, total, diverged = 0, 0, []
    for i, ((ids, mask, a, lp_a), (ids_w, mask_w, b, lp_b)) in enumerate(zip(_rows(got), _rows(want))):
        assert torch.equal(ids, ids_w) and torch.equal(mask, mask_w), f"row {i}: not the same prompt"
        total += len(b)
        t = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        for k in range(t):  # the common prefix: same context, same token
            assert abs(lp_a[k] - lp_b[k]) <= lp_tol, f"row {i} token {k}: log-probs {lp_a[k]:.6g} vs {lp_b[k]:.6g}"
        compared += t
        if len(a) == len(b) == t:
            continue
        assert t < len(a) and t < len(b), f"row {i}: one response ends at {t} without a different token: {a} vs {b}"
        context = torch.cat([ids, torch.tensor(b[:t], dtype=ids.dtype)])[None]
        context_mask = torch.cat([mask, torch.ones(t, dtype=mask.dtype)])[None]
        f = torch.log_softmax(forward(context, context_mask)[0], dim=-1)
        best = float(f.max())
        for name, tok, lp in (("got", a[t], lp_a[t]), ("want", b[t], lp_b[t])):
            assert best - float(f[tok]) <= 2 * forward_tol, (
                f"row {i} token {t}: {name}'s token {tok} is {best - float(f[tok]):.4g} below the best log-prob "
                f"(a near tie allows {2 * forward_tol:.3g}): not a rounding difference")
            assert abs(lp - float(f[tok])) <= forward_tol, (
                f"row {i} token {t}: {name}'s log-prob {lp:.6g} vs the forward's {float(f[tok]):.6g}")
        diverged.append((i, t))
    assert compared >= min_compared * total, (
        f"only {compared} of {total} tokens compared; rows diverged (row, token) at near ties: {diverged}")
    return compared
