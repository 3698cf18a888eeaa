"""Per-token log-probs and entropy of response tokens, without the full logits tensor.

The backbone runs once; the LM head is applied to response positions only, in chunks
of `chunk_size` tokens, so the float32 [batch, length, vocab] tensor is never built.
`ChunkedLogProbs` is one autograd node for all chunks: forward keeps only the hidden
states and the head weight (both in the matmul dtype) and two floats per token (log-sum-exp,
entropy); backward recomputes each chunk's
logits and forms d(loss)/d(logits) in closed form, so peak memory is one chunk of logits
in forward and in backward. With z = (h W^T + b) / T, p = softmax(z), lse = logsumexp(z):

    log p(y)   = z_y - lse                     d/dz_k = 1[k = y] - p_k
    H          = lse - sum_k p_k z_k            d/dz_k = -p_k (z_k - lse + H)

`keep_logits=True` (`training.logprob_keep_logits`) trades memory for speed: forward forms
all logits Z = h W^T (N, V) in one matmul in the matmul dtype (bf16: 2 bytes x vocab per
response token) and keeps them; backward overwrites Z with d(loss)/dZ chunk by chunk and
finishes with two large matmuls (dL/dh = dZ W, dL/dW = dZ^T h). No recomputed head matmul
(a third of the head's backward FLOPs), no per-chunk float32 copy of dL/dW. The float32
softmax math still runs per chunk, so no float32 (N, V) tensor exists in either mode.

With `packed=True` the micro-batch runs padding-free (`verl.workers.packing`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F

from verl.algorithms.entropy import entropy_from_logits
from verl.models.lora import base_model


def backbone_hidden(model: torch.nn.Module, input_ids, attention_mask, position_ids, multi_modal=None,
                    **kwargs) -> torch.Tensor:
    """Last hidden states (B, T, H) of a causal LM's trunk. A vision-language model's trunk
    (`model.model`: Qwen2_5_VLModel, LlavaModel in transformers 5) takes the rows' images:
    `multi_modal` (one MultiModalInputs or None per row, Batch.multi_modal) becomes its pixel values,
    grids and positions (verl.data.multimodal.forward_kwargs); the LM head is applied by the caller
    as for a text model (`get_output_embeddings`, the same lm_head)."""
    hf = base_model(model)
    trunk = getattr(hf, hf.base_model_prefix)
    if multi_modal:
        from verl.data.multimodal import forward_kwargs

        kwargs.update(forward_kwargs(hf.config, input_ids, position_ids, multi_modal))
    else:
        kwargs["position_ids"] = position_ids
    out = trunk(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)
    return out.last_hidden_state


def _matmul_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's when on, else the hidden states'."""
    if torch.is_autocast_enabled(hidden.device.type):
        return torch.get_autocast_dtype(hidden.device.type)
    return hidden.dtype


def _chunk_stats(z: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool):
    """Logits chunk (c, V) in the matmul dtype -> (log p(y), lse, entropy), float32 (c,)."""
    z = z.float()
    if temperature != 1.0:
        z = z / temperature
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets[:, None]).squeeze(-1) - lse
    if with_entropy:
        ent = lse - (torch.exp(z - lse[:, None]) * z).sum(dim=-1)
    else:
        ent = torch.zeros_like(lse)
    return logp, lse, ent


def _chunk_grad_(z: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, ent: torch.Tensor,
                 g_lp: Optional[torch.Tensor], g_ent: Optional[torch.Tensor], temperature: float) -> None:
    """Overwrite a logits chunk z (c, V) with d(loss)/d(raw logits), in z's dtype:
    g_lp (1[k=y] - p_k) - g_ent p_k (z_k - lse + H), divided by the temperature.
    Compiled (`fused`), the one-hot is a comparison with the column index, so the whole
    expression and the write into z are one pass over the chunk (a scatter would split it
    into three: float32 dz, scatter, cast); eager, a scatter on the (c, V) float32 dz."""
    x = z.float()
    if temperature != 1.0:
        x = x / temperature
    p = torch.exp(x - lse[:, None])
    if g_ent is not None:
        dz = -(p * (x - lse[:, None] + ent[:, None])) * g_ent[:, None]
        if g_lp is not None:
            dz = dz - p * g_lp[:, None]
    else:
        dz = -p * g_lp[:, None]
    if g_lp is not None:
        if torch.compiler.is_compiling():
            hit = torch.arange(z.shape[-1], device=z.device)[None, :] == targets[:, None]
            dz = dz + torch.where(hit, g_lp[:, None], 0.0)
        else:
            dz = dz.scatter_add(-1, targets[:, None], g_lp[:, None])
    if temperature != 1.0:
        dz = dz / temperature
    z.copy_(dz)


_COMPILED: dict = {}


# Inductor options of the compiled chunk math: 2-D (row, vocab) tiles index without a
# division by the vocabulary size per element.
_HEAD_COMPILE_OPTIONS = {"triton.prefer_nd_tiling": True}


def _kernels(fused: bool):
    """The chunk functions, torch.compile'd (one fused pass over each logits chunk instead of
    several) when `fused`; compiled once per process. Shapes are automatic-dynamic: the first
    chunk compiles static, a second row count recompiles with only the rows dynamic. The
    vocabulary stays a constant: with it symbolic (dynamic=True) every element pays a 64-bit
    division: on an H200 the in-place gradient pass of a 4096 x 151936 bf16 chunk takes 2.01 ms
    (1.24 TB/s) with dynamic=True and 0.70 ms (3.58 TB/s) so (`benchmarks/head_math.py`)."""
    if not fused:
        return _chunk_stats, _chunk_grad_
    if not _COMPILED:
        _COMPILED["stats"] = torch.compile(_chunk_stats, dynamic=None, options=_HEAD_COMPILE_OPTIONS)
        _COMPILED["grad"] = torch.compile(_chunk_grad_, dynamic=None, options=_HEAD_COMPILE_OPTIONS)
    return _COMPILED["stats"], _COMPILED["grad"]


# float32 temporaries per pass of the softmax math on the CPU: about one core's L2 cache
CPU_MATH_BYTES = 1 << 20


def _math_rows(z: torch.Tensor, fused: bool) -> int:
    """Rows of a logits chunk z (c, V) per pass of the float32 softmax math. A GPU (or the
    compiled kernels, one fused pass) takes the chunk whole. Unfused on the CPU, each of the
    ~8 elementwise ops would stream c x V floats through memory, so the math runs in
    cache-sized row blocks (at V = 49k, 1024 rows: 0.6 s instead of 1.4 s per update's head)."""
    if z.is_cuda or fused:
        return z.shape[0]
    return max(1, CPU_MATH_BYTES // (4 * z.shape[1]))


def _stats_into(stats, z, s, targets, temperature, with_entropy, rows, logp, lse, ent) -> None:
    """Log-probs, lse, entropy of logits chunk z (rows s.. of the batch) into the outputs."""
    for a in range(0, z.shape[0], rows):
        i, j = s + a, s + min(a + rows, z.shape[0])
        logp[i:j], lse[i:j], ent[i:j] = stats(z[a:a + rows], targets[i:j], temperature, with_entropy)


def _grad_in_place(grad_fn, z, s, targets, lse, ent, g_lp, g_ent, temperature, rows) -> torch.Tensor:
    """Overwrite logits chunk z (rows s.. of the batch) with d(loss)/dz; returns z."""
    for a in range(0, z.shape[0], rows):
        i, j = s + a, s + min(a + rows, z.shape[0])
        grad_fn(z[a:a + rows], targets[i:j], lse[i:j], ent[i:j], None if g_lp is None else g_lp[i:j],
                None if g_ent is None else g_ent[i:j], temperature)
    return z


class ChunkedLogProbs(torch.autograd.Function):
    """(hidden (N, H), weight (V, H), bias (V,) | None, targets (N,)) -> (log p(y) (N,), H (N,)).

    Logits are formed in `dtype` (bf16 under autocast) and reduced in float32. `keep_logits`:
    see the module docstring (the backward consumes the kept logits: one backward per graph)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature: float, chunk_size: int, dtype: torch.dtype,
                with_entropy: bool, fused: bool, keep_logits: bool):
        stats, _ = _kernels(fused)
        w = weight.to(dtype)  # cast once; kept for the backward (no second cast there)
        b = None if bias is None else bias.to(dtype)
        h = hidden.to(dtype)
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        ent = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        z_all = F.linear(h, w, b) if keep_logits else None  # (N, V) in dtype
        for s in range(0, n, chunk_size):
            z = z_all[s:s + chunk_size] if keep_logits else F.linear(h[s:s + chunk_size], w, b)
            _stats_into(stats, z, s, targets, temperature, with_entropy, _math_rows(z, fused), logp, lse, ent)
        ctx.save_for_backward(h, w, b, targets, lse, ent, z_all)
        ctx.cfg = (temperature, chunk_size, with_entropy, fused, hidden.dtype, weight.dtype,
                   None if bias is None else bias.dtype)
        ctx.consumed = False
        ctx.set_materialize_grads(False)
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp, grad_ent):
        if ctx.consumed:  # checked before unpacking: autograd's own version check is less clear
            raise RuntimeError("training.logprob_keep_logits: the kept logits were used by a first backward "
                               "(a second backward through the same graph is not supported with it)")
        h, w, b, targets, lse, ent, z_all = ctx.saved_tensors
        temperature, chunk_size, with_entropy, fused, h_dtype, w_dtype, b_dtype = ctx.cfg
        if not with_entropy:
            grad_ent = None
        none = (None,) * 10
        if grad_logp is None and grad_ent is None:
            return none
        ctx.consumed = z_all is not None
        _, grad_fn = _kernels(fused)
        need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        n = h.shape[0]

        def dz_chunk(s: int, z: torch.Tensor) -> torch.Tensor:  # logits (c, V) -> dL/dz, in place
            return _grad_in_place(grad_fn, z, s, targets, lse, ent, grad_logp, grad_ent, temperature,
                                  _math_rows(z, fused))

        if z_all is not None:  # dZ replaces Z in place, then one matmul per gradient
            for s in range(0, n, chunk_size):
                dz_chunk(s, z_all[s:s + chunk_size])
            grad_h = (z_all @ w).to(h_dtype) if need_h else None
            grad_w = (z_all.t() @ h).to(w_dtype) if need_w else None
            grad_b = None
            if need_b:
                grad_b = torch.zeros(z_all.shape[1], dtype=torch.float32, device=z_all.device)
                for s in range(0, n, chunk_size):
                    grad_b += z_all[s:s + chunk_size].float().sum(dim=0)
                grad_b = grad_b.to(b_dtype)
            return (grad_h, grad_w, grad_b) + none[3:]
        grad_h = torch.empty(h.shape, dtype=h_dtype, device=h.device) if need_h else None
        grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if need_w else None
        grad_b = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device) if need_b else None
        for s in range(0, n, chunk_size):
            e = min(n, s + chunk_size)
            dz = dz_chunk(s, F.linear(h[s:e], w, b))  # recomputed logits, then dL/dz in their place
            if need_h:
                grad_h[s:e] = (dz @ w).to(h_dtype)
            if need_w:
                grad_w += (dz.t() @ h[s:e]).float()
            if need_b:
                grad_b += dz.float().sum(dim=0)
        grad_w = grad_w.to(w_dtype) if need_w else None
        grad_b = grad_b.to(b_dtype) if need_b else None
        return (grad_h, grad_w, grad_b) + none[3:]


def head_log_probs(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, temperature: float = 1.0,
                   chunk_size: int = 1024, with_entropy: bool = True, fused: bool = False,
                   keep_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(targets) and entropy from hidden states (N, H) through the LM head `head`
    (nn.Linear-like: `.weight` (V, H), optional `.bias`), chunked. Returns float32 (N,), (N,);
    the entropy is zeros when `with_entropy` is False. `fused` compiles the per-chunk math
    (`model.torch_compile`). `keep_logits` keeps the (N, V) logits for the backward instead of
    recomputing them (`training.logprob_keep_logits`); a no-grad call never keeps them."""
    weight, bias = head.weight, getattr(head, "bias", None)
    if hidden.shape[0] == 0:  # no response token: empty outputs that still reach the graph
        empty = hidden.new_zeros(0, dtype=torch.float32) + 0.0 * weight.sum()
        return empty, empty
    keep = bool(keep_logits) and torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return ChunkedLogProbs.apply(hidden, weight, bias, targets, float(temperature), int(chunk_size),
                                 _matmul_dtype(hidden), bool(with_entropy), bool(fused), keep)


@torch.no_grad()
def head_sum_pi_squared(hidden: torch.Tensor, head: torch.nn.Module, temperature: float = 1.0,
                        chunk_size: int = 1024) -> torch.Tensor:
    """sum_v pi(v)^2 (N,) float32 of each position's next-token distribution, from hidden states
    (N, H) through the LM head, chunked like `head_log_probs` (no (N, V) tensor at once). The
    squared norm of pi: 1 for a certain policy, 1/V for a uniform one (the optimal token
    baseline's variance proxy reads it)."""
    weight, bias = head.weight, getattr(head, "bias", None)
    dtype = _matmul_dtype(hidden)
    out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    w = weight.to(dtype)
    b = None if bias is None else bias.to(dtype)
    for s in range(0, hidden.shape[0], chunk_size):
        z = torch.nn.functional.linear(hidden[s:s + chunk_size].to(dtype), w, b).float() / temperature
        out[s:s + chunk_size] = torch.exp(2 * torch.log_softmax(z, dim=-1)).sum(dim=-1)
    return out


def lm_head(model: torch.nn.Module) -> torch.nn.Module:
    """The output projection of a causal LM. A LoRA-wrapped head (peft `target_modules`
    naming lm_head) is not supported here: peft's "all-linear" leaves the head alone."""
    head = base_model(model).get_output_embeddings()
    if not isinstance(getattr(head, "weight", None), torch.Tensor) or hasattr(head, "lora_A"):
        raise NotImplementedError("the LM head must be a plain linear layer (do not put LoRA on lm_head)")
    return head


class ResponseHidden(NamedTuple):
    """The trunk's last hidden states at the N positions that predict response tokens.

    hidden (N, H): padded rows give N = B * R (padding included); packed rows only the real
    tokens. targets (N,): the response token each position predicts. `unpack` turns any
    per-position tensor (N,) back into (B, R), zeros at padding. The same positions serve
    the LM head (log pi(y_t | s_t)) and a value head (V(s_t)), so one trunk pass feeds both.
    """

    hidden: torch.Tensor
    targets: torch.Tensor
    unpack: Callable[[torch.Tensor], torch.Tensor]


def response_hidden(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    position_ids: torch.Tensor, response_length: int, packed=False,
                    packing_mode: Optional[str] = None, multi_modal=None) -> ResponseHidden:
    """One trunk pass over (B, T) rows whose last R = response_length columns are the response.

    Padded: position P-1+t predicts response token t, so hidden[:, T-R-1 : T-1] is kept.
    Packed (`packed=True`, or a `PackedBatch` already built from these rows): only the real
    tokens run, as one row (`verl.workers.packing`). `multi_modal`: the rows' images
    (Batch.multi_modal), padded rows only (the config refuses packing with images).
    """
    if any(m is not None for m in multi_modal or ()) and packed is not False and packed is not None:
        raise ValueError("packed micro-batches cannot carry images (training.use_packed_samples)")
    if packed is not False and packed is not None:
        from verl.workers.packing import PackedBatch, causal_lm_trunk, pack_batch, packed_forward, prepare_packing

        trunk = causal_lm_trunk(model)
        mode = packing_mode or prepare_packing(trunk)
        pk = packed if isinstance(packed, PackedBatch) else pack_batch(input_ids, attention_mask, response_length)
        hidden = packed_forward(trunk, pk, mode)[0]  # (N_all, H)
        return ResponseHidden(hidden[pk.pred_index], pk.target_ids, pk.unpack)
    b, t = input_ids.shape
    trunk_ids = input_ids
    if multi_modal:  # placeholders in a response have no image: the trunk sees pads there (targets unchanged)
        from verl.data.multimodal import without_response_placeholders

        trunk_ids = without_response_placeholders(base_model(model).config, input_ids, response_length)
    hidden = backbone_hidden(model, trunk_ids, attention_mask, position_ids, multi_modal)
    hidden = hidden[:, t - response_length - 1: t - 1].reshape(b * response_length, -1)
    targets = input_ids[:, t - response_length:].reshape(-1)
    return ResponseHidden(hidden, targets, lambda x: x.view(b, response_length))


def response_log_probs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       position_ids: torch.Tensor, response_length: int, temperature: float = 1.0,
                       chunk_size: int = 1024, with_entropy: bool = True, packed=False,
                       packing_mode: Optional[str] = None, fused: bool = False, multi_modal=None):
    """log pi(y_t | x, y_<t) and the policy entropy at each response position.

    input_ids (B, T) with the response in the last R = response_length columns; padding
    positions come back as 0 when packed. Returns (log_probs (B, R), entropy (B, R)), float32.
    """
    head = lm_head(model)
    rh = response_hidden(model, input_ids, attention_mask, position_ids, response_length, packed, packing_mode,
                         multi_modal)
    lp, ent = head_log_probs(rh.hidden, head, rh.targets, temperature, chunk_size, with_entropy, fused)
    return rh.unpack(lp), rh.unpack(ent)


def naive_response_log_probs(model: torch.nn.Module, input_ids, attention_mask, position_ids, response_length: int,
                             temperature: float = 1.0):
    """Reference: full float32 logits (B, R, V), log_softmax, gather. For tests and benchmarks."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits
    t = input_ids.shape[1]
    logits = logits[:, t - response_length - 1: t - 1].float() / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, t - response_length:, None]).squeeze(-1)
    return logp, entropy_from_logits(logits)
