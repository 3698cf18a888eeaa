"""Sequence packing: run a micro-batch padding-free, as one row of concatenated sequences.

A padded micro-batch (B, T) spends compute on pad tokens: with response lengths that vary
widely most of a (B, P + R) block can be padding. Packing keeps only the real tokens:

    input_ids (B, T), attention_mask (B, T)  ->  input_ids (1, N), N = attention_mask.sum()
    position_ids (1, N)   restart at 0 for every sequence
    cu_seqlens   (B + 1,) int32, sequence i is row[cu[i]:cu[i+1]]

and attention is kept inside each sequence (block-diagonal causal). Per-token outputs for
the response come back to the padded (B, R) layout with `PackedBatch.unpack`, zero on
padding, so everything downstream (losses, advantages) is unchanged.

How attention stays inside each sequence (`prepare_packing` picks one per model, then
checks it on the model itself against separate per-sequence forwards):

    "attention"  verl's attention function (registered with transformers as "verl_packed"):
                 on CUDA in bf16/fp16 the FlashAttention varlen kernel that PyTorch ships
                 (no flash-attn package needed), elsewhere one causal SDPA call per sequence.
                 Calls without packing metadata (generation, padded forwards) go to the
                 standard SDPA path, so the model behaves as before everywhere else.
    "native"     a model already on flash_attention_2: transformers' own varlen path.
    "mask"       the plain fallback: transformers builds a block-diagonal causal mask from
                 the restarting position_ids (attention_mask=None, no cache). Correct for any
                 model using transformers' masking utilities, but the mask is (N, N).

The only switch is `training.use_packed_samples`; `VERL_PACKED_ATTENTION=attention|mask`
forces a method (benchmarks, tests).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from verl.models.lora import base_model

logger = logging.getLogger(__name__)

ATTN_NAME = "verl_packed"
MODES = ("attention", "native", "mask")


class PackingUnsupported(RuntimeError):
    """The model cannot run packed sequences correctly (e.g. a bidirectional encoder)."""


# ---------------------------------------------------------------------------
# Packing a micro-batch
# ---------------------------------------------------------------------------


@dataclass
class PackedBatch:
    """One micro-batch packed into a single row, plus where each response token goes back.

    input_ids, position_ids (1, N); cu_seqlens (B + 1,) int32; max_seqlen = longest sequence.
    For the M real response tokens (row-major order):
        pred_index (M,)  index in the packed row of the hidden state that predicts the token
                         (the previous token of the same sequence)
        target_ids (M,)  the token itself
        rows, cols (M,)  its place in the (B, R) response block
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    pred_index: torch.Tensor
    target_ids: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    shape: tuple[int, int]

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[1]

    def model_kwargs(self) -> dict:
        """The varlen metadata, under the names transformers' attention functions read."""
        return dict(cu_seq_lens_q=self.cu_seqlens, cu_seq_lens_k=self.cu_seqlens,
                    max_length_q=self.max_seqlen, max_length_k=self.max_seqlen)

    def to(self, device) -> "PackedBatch":
        """Copy to `device` (pinned, non-blocking from the CPU: packing runs on the CPU
        while the GPU is still busy with the previous micro-batch)."""
        from verl.workers.micro_batches import tensor_to_device

        fields = {f: tensor_to_device(getattr(self, f), device) for f in
                  ("input_ids", "position_ids", "cu_seqlens", "pred_index", "target_ids", "rows", "cols")}
        return PackedBatch(max_seqlen=self.max_seqlen, shape=self.shape, **fields)

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """(M,) per-response-token values -> (B, R), zeros on padding (differentiable)."""
        out = values.new_zeros(self.shape)
        return out.index_put((self.rows, self.cols), values)


def pack_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, response_length: int) -> PackedBatch:
    """Pack the real tokens (attention_mask == 1) of a (B, T) micro-batch whose last
    `response_length` columns are the response block. Real tokens of a row must be
    contiguous (left-padded prompt, right-padded response: the rollout layout)."""
    b, t = input_ids.shape
    real = attention_mask.bool()
    lengths = real.sum(dim=1)
    if bool((lengths == 0).any()):
        raise ValueError("pack_batch: a sequence without real tokens cannot be packed")
    rank = real.long().cumsum(dim=1) - 1  # (B, T) index of each real token within its row
    cu = torch.zeros(b + 1, dtype=torch.int32, device=input_ids.device)
    cu[1:] = lengths.cumsum(0).to(torch.int32)
    packed_ids = input_ids[real].unsqueeze(0)  # row-major: sequence after sequence
    position_ids = rank[real].unsqueeze(0)
    p = t - response_length
    resp_real = real[:, p:]
    rows, cols = resp_real.nonzero(as_tuple=True)
    token_index = cu[rows].long() + rank[rows, p + cols]
    pred_index = token_index - 1
    if bool((pred_index < cu[rows].long()).any()):
        raise ValueError("pack_batch: a response token has no prompt token before it")
    return PackedBatch(input_ids=packed_ids, position_ids=position_ids, cu_seqlens=cu,
                       max_seqlen=int(lengths.max()), pred_index=pred_index,
                       target_ids=input_ids[rows, p + cols], rows=rows, cols=cols, shape=(b, response_length))


# ---------------------------------------------------------------------------
# The attention function ("attention" mode)
# ---------------------------------------------------------------------------


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    if torch.is_autocast_enabled(t.device.type):
        return torch.get_autocast_dtype(t.device.type)
    return t.dtype


def _flash_varlen(q, k, v, cu, max_len, scale, dropout):
    """FlashAttention-2 varlen kernel shipped in PyTorch's CUDA build (differentiable).
    q (N, Hq, D), k/v (N, Hk, D) in bf16/fp16 -> (N, Hq, D)."""
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, dropout, True, False,
                                                  scale=scale)
    return out[0]


def _per_sequence(attend, q, k, v, cu_list, scale, dropout):
    """Causal attention inside each sequence of a packed row, one `attend` call per sequence.
    q (1, Hq, N, D), k/v (1, Hk, N, D) -> (1, N, Hq, D)."""
    outs = [attend(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], scale, dropout)
            for a, b in zip(cu_list[:-1], cu_list[1:]) if b > a]
    return torch.cat(outs, dim=2).transpose(1, 2)


def _causal_sdpa(q, k, v, scale, dropout):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scale)


def _causal_eager(q, k, v, scale, dropout):
    """Explicit matmuls + float32 softmax (transformers' eager attention): on the CPU in
    bf16/fp16, SDPA's flash backward is ~2.5x slower than these batched matmuls."""
    t = q.shape[2]
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    p = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(F.dropout(p, dropout, training=dropout > 0), v)


def _segments_sdpa(q, k, v, cu_list, scale, dropout):
    return _per_sequence(_causal_sdpa, q, k, v, cu_list, scale, dropout)


def _segments_eager(q, k, v, cu_list, scale, dropout):
    return _per_sequence(_causal_eager, q, k, v, cu_list, scale, dropout)


@functools.lru_cache(maxsize=32)
def varlen_kernel_works(device: str, dtype: torch.dtype, hq: int, hk: int, d: int) -> bool:
    """Check once per shape that the varlen kernel runs and matches per-sequence SDPA, values
    and gradients (a PyTorch build without it, or with another signature, falls back)."""
    if not device.startswith("cuda") or dtype not in (torch.bfloat16, torch.float16):
        return False
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        lens = [37, 64, 5]
        cu_list = [0, 37, 101, 106]
        n = cu_list[-1]
        with torch.autocast(device_type="cuda", enabled=False), torch.enable_grad():
            q = torch.randn(n, hq, d, device=device, dtype=dtype, generator=gen).requires_grad_()
            k = torch.randn(n, hk, d, device=device, dtype=dtype, generator=gen).requires_grad_()
            v = torch.randn(n, hk, d, device=device, dtype=dtype, generator=gen).requires_grad_()
            cu = torch.tensor(cu_list, dtype=torch.int32, device=device)
            out = _flash_varlen(q, k, v, cu, max(lens), d ** -0.5, 0.0)
            g = torch.randn_like(out)
            grads = torch.autograd.grad(out, (q, k, v), g)
            rep = hq // hk
            qr, kr, vr = (x.detach().float().requires_grad_() for x in (q, k, v))
            ref = _segments_sdpa(qr.transpose(0, 1)[None], kr.repeat_interleave(rep, 1).transpose(0, 1)[None],
                                 vr.repeat_interleave(rep, 1).transpose(0, 1)[None], cu_list, d ** -0.5, 0.0)[0]
            ref_grads = torch.autograd.grad(ref, (qr, kr, vr), g.float())
        ok = all(torch.allclose(a.float(), b, atol=3e-2, rtol=3e-2) for a, b in zip((out,) + grads, (ref,) + ref_grads))
        if not ok:
            logger.warning("verl packing: the varlen flash kernel disagrees with SDPA; using per-sequence SDPA")
        return ok
    except Exception as exc:  # kernel missing on this build / GPU: the SDPA loop is the fallback
        logger.warning("verl packing: varlen flash kernel unavailable (%s); using per-sequence SDPA",
                       str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return False


def packed_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                             scaling: Optional[float] = None, is_causal=None, **kwargs):
    """transformers attention interface: query (B, Hq, T, D), key/value (B, Hk, T, D) ->
    (B, T, Hq, D). With `cu_seq_lens_q` (packed call, B == 1): causal attention inside each
    sequence (CUDA bf16/fp16: the varlen flash kernel; CPU bf16/fp16: eager matmuls per
    sequence; otherwise SDPA per sequence). Without: the standard SDPA attention
    (generation, padded forwards)."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
    hq, hk, d = query.shape[1], key.shape[1], query.shape[-1]
    scale = scaling if scaling is not None else d ** -0.5
    dtype = _compute_dtype(query)
    if query.is_cuda and varlen_kernel_works(str(query.device), dtype, hq, hk, d):
        q, k, v = (x[0].transpose(0, 1).to(dtype) for x in (query, key, value))  # (N, H, D)
        out = _flash_varlen(q.contiguous(), k.contiguous(), v.contiguous(), cu, int(kwargs["max_length_q"]),
                            scale, dropout)
        return out.unsqueeze(0), None
    if hk != hq:
        key = key.repeat_interleave(hq // hk, dim=1)
        value = value.repeat_interleave(hq // hk, dim=1)
    segments = _segments_eager if query.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16) \
        else _segments_sdpa
    return segments(query, key, value, cu.tolist(), scale, dropout), None


@functools.lru_cache(maxsize=1)
def register_packed_attention() -> str:
    """Register "verl_packed" with transformers (attention function + SDPA's mask builder)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    # Eager even inside torch.compile'd layers (model.torch_compile): custom kernel, Python ints.
    AttentionInterface.register(ATTN_NAME, torch.compiler.disable(packed_attention_forward))
    # Padded calls and generation build their masks exactly as for "sdpa".
    AttentionMaskInterface.register(ATTN_NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return ATTN_NAME


def _set_attention(trunk: torch.nn.Module, name: str) -> bool:
    """Switch the model's attention implementation; False if this transformers refuses."""
    try:
        trunk.set_attn_implementation(name)
    except Exception as exc:  # older/newer transformers: validation differs
        logger.warning("verl packing: cannot set attention '%s' (%s)", name, str(exc).splitlines()[0] if str(exc) else exc)
        return False
    return trunk.config._attn_implementation == name


# ---------------------------------------------------------------------------
# Choosing and checking the method for a model
# ---------------------------------------------------------------------------


def _attention_modules(trunk: torch.nn.Module):
    return [m for m in trunk.modules() if hasattr(m, "is_causal") and hasattr(m, "layer_idx")]


def _check_causal(trunk: torch.nn.Module) -> None:
    mods = [m for m in trunk.modules() if hasattr(m, "is_causal")]
    if mods and not all(bool(m.is_causal) for m in mods):
        raise PackingUnsupported(
            f"training.use_packed_samples: {type(trunk).__name__} has bidirectional attention; packing "
            "supports causal (decoder) models only -- set training.use_packed_samples: false")


def packed_forward(trunk: torch.nn.Module, packed: PackedBatch, mode: str, **extra):
    """Run a transformers base model (trunk) on a packed row: (1, N, H) last hidden states."""
    kwargs = packed.model_kwargs() if mode in ("attention", "native") else {}
    out = trunk(input_ids=packed.input_ids, attention_mask=None, position_ids=packed.position_ids,
                use_cache=False, **kwargs, **extra)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


@contextlib.contextmanager
def _first_layers(trunk: torch.nn.Module, k: int = 2):
    """Temporarily keep only the first k decoder layers: isolation is a per-layer property,
    and two layers keep the check fast and free of deep-network rounding noise."""
    for owner in trunk.modules():
        for name in ("layers", "h"):
            seq = getattr(owner, name, None)
            if isinstance(seq, torch.nn.ModuleList) and len(seq) > k:
                setattr(owner, name, torch.nn.ModuleList(list(seq)[:k]))
                try:
                    yield
                finally:
                    setattr(owner, name, seq)
                return
    yield


@torch.no_grad()
def _self_test(trunk: torch.nn.Module, mode: str) -> bool:
    """Packed forward of 3 short sequences == separate forwards (in the model's own dtype)."""
    param = next(trunk.parameters())
    vocab = trunk.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(1234)
    lens = [5, 2, 8]
    seqs = [torch.randint(0, vocab, (n,), generator=gen).to(param.device) for n in lens]
    mask = torch.zeros(len(lens), max(lens), dtype=torch.long, device=param.device)
    ids = torch.zeros_like(mask)
    for i, s in enumerate(seqs):  # left-padded prompt-only rows; response block = last column
        mask[i, -len(s):] = 1
        ids[i, -len(s):] = s
    packed = pack_batch(ids, mask, 1)
    was_training = trunk.training
    trunk.eval()
    try:
        with _first_layers(trunk):
            got = packed_forward(trunk, packed, mode).float()[0]
            refs = [trunk(input_ids=s[None], use_cache=False).last_hidden_state.float()[0] for s in seqs]
    finally:
        trunk.train(was_training)
    # Relative error per sequence. Attending across sequences changes the later ones
    # completely (error ~1); correct packing differs only by kernel rounding (bf16: ~1e-2).
    tol = 1e-3 if param.dtype == torch.float32 else 0.1
    errs, start = [], 0
    for ref in refs:
        part = got[start:start + len(ref)]
        start += len(ref)
        errs.append(float((part - ref).norm() / ref.norm().clamp(min=1e-6)))
    if max(errs) > tol:
        logger.warning("verl packing: mode %s fails the self-test on %s (relative errors %s)", mode,
                       type(trunk).__name__, ", ".join(f"{e:.2e}" for e in errs))
    return max(errs) <= tol


def prepare_packing(trunk: torch.nn.Module) -> str:
    """Make `trunk` (a transformers base model: Qwen2Model, GPT2Model, ...) run packed rows
    correctly and return the method ("attention" | "native" | "mask"). Idempotent."""
    mode = getattr(trunk, "_verl_packing_mode", None)
    if mode is not None:
        return mode
    if getattr(trunk.config, "vision_config", None) is not None:
        raise PackingUnsupported("training.use_packed_samples: a vision-language model's images do not pack (one "
                                 "packed row of several sequences cannot carry their images) -- set "
                                 "training.use_packed_samples: false")
    _check_causal(trunk)
    config = trunk.config
    current = getattr(config, "_attn_implementation", None)
    forced = os.environ.get("VERL_PACKED_ATTENTION")
    if forced and forced not in ("attention", "mask"):
        raise ValueError(f"VERL_PACKED_ATTENTION: '{forced}' is not one of attention, mask")
    special = any(getattr(m, "sliding_window", None) for m in _attention_modules(trunk)) or \
        getattr(config, "attn_logit_softcapping", None)
    if current == "flash_attention_2":
        candidates = ["native", "mask"]
    elif special or current not in ("sdpa", "eager", ATTN_NAME):
        candidates = ["mask"]  # sliding windows / soft-capping / custom kernels: transformers' masks
    else:
        candidates = ["attention", "mask"]
    if forced:
        candidates = [forced]
    for mode in candidates:
        previous = config._attn_implementation
        if mode == "attention":
            try:
                register_packed_attention()
            except Exception as exc:
                logger.warning("verl packing: cannot register the packed attention (%s)", exc)
                continue
            if not _set_attention(trunk, ATTN_NAME):
                continue
        try:
            ok = _self_test(trunk, mode)
        except Exception as exc:
            logger.warning("verl packing: mode %s fails on %s (%s: %s)", mode, type(trunk).__name__,
                           type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            ok = False
        if ok:
            trunk._verl_packing_mode = mode
            return mode
        if mode == "attention":
            _set_attention(trunk, previous)
    raise PackingUnsupported(
        f"training.use_packed_samples: {type(trunk).__name__} does not keep packed sequences apart with any "
        f"method ({', '.join(candidates)}); set training.use_packed_samples: false")


def causal_lm_trunk(model: torch.nn.Module) -> torch.nn.Module:
    """The base model (e.g. Qwen2Model) inside a causal LM, under a peft wrapper if any."""
    hf = base_model(model)
    return getattr(hf, hf.base_model_prefix)


def restore_attention(trunk: torch.nn.Module, implementation: str = "sdpa") -> None:
    """Undo "attention" mode (e.g. before handing the model to code that reads its config)."""
    if getattr(trunk, "_verl_packing_mode", None) == "attention":
        trunk.set_attn_implementation(implementation)
        del trunk._verl_packing_mode


__all__ = ["PackedBatch", "pack_batch", "prepare_packing", "packed_forward", "causal_lm_trunk",
           "PackingUnsupported", "packed_attention_forward", "register_packed_attention", "restore_attention"]
