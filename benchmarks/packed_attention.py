"""Packed (varlen) causal attention kernels, forward + backward, on one packed row.

Compares the kernels `verl.workers.packing` can call for a packed micro-batch, on the
attention shape of a real architecture and sequence lengths drawn like actor_update's:

    flash     FlashAttention-2 varlen (`aten._flash_attention_forward`, PyTorch's CUDA build):
              what `verl.workers.packing` runs on CUDA
    cudnn     cuDNN fused attention with ragged offsets (`aten._cudnn_attention_forward`)
    flex      FlexAttention (Triton) with a document-causal block mask; flex-tma with TMA loads
    sdpa      one causal SDPA call per sequence (verl's portable fallback; also the reference)

Each kernel's output and gradients are checked against per-sequence SDPA in float32, then
timed (forward, forward + backward). FLOPs count causal QK^T and AV only:
4 * Hq * D * s * (s + 1) / 2 per sequence forward, 2.5x that for the backward.

    python benchmarks/packed_attention.py --device cuda --arch qwen2-1.5b
    python benchmarks/packed_attention.py --device cpu --tiny
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import common  # noqa: E402


def lengths(n_tokens: int, prompt_range, response_range, seed: int = 0) -> list[int]:
    """Sequence lengths (prompt + response, uniform) until `n_tokens` are filled."""
    gen = torch.Generator().manual_seed(seed)
    out, total = [], 0
    while True:
        s = int(torch.randint(prompt_range[0], prompt_range[1] + 1, (1,), generator=gen)) + \
            int(torch.randint(response_range[0], response_range[1] + 1, (1,), generator=gen))
        if total + s > n_tokens:
            return out
        out.append(s)
        total += s


def _cudnn_varlen(q, k, v, cu, max_len, scale):
    """cuDNN fused attention over ragged sequences (the kernel behind SDPA on nested tensors)."""
    need_lse = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    return torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, max_len, max_len, need_lse, 0.0, True,
                                                   False, scale=scale)[0]


def _flex_kernel(options):
    """FlexAttention (Triton, compiled) with a block-diagonal causal block mask from cu."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def run(q, k, v, cu, cu_list, max_len, scale):
        n = q.shape[0]
        key = tuple(cu_list)
        if key not in masks:
            doc = torch.repeat_interleave(torch.arange(len(cu_list) - 1, device=q.device),
                                          torch.diff(cu).long(), output_size=n)

            def document_causal(b, h, qi, ki):
                return (doc[qi] == doc[ki]) & (qi >= ki)

            masks[key] = create_block_mask(document_causal, None, None, n, n, device=q.device)
        out = compiled(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                       block_mask=masks[key], scale=scale, enable_gqa=True, kernel_options=options)
        return out[0].transpose(0, 1)
    return run


def packed_kernel(name: str, hq: int, hk: int):
    """f(q, k, v, cu, cu_list, max_len, scale): q (N, Hq, D), k/v (N, Hk, D) -> (N, Hq, D)."""
    from verl.workers import packing

    if name == "flash":  # what verl.workers.packing runs on CUDA
        return lambda q, k, v, cu, cu_list, max_len, scale: packing._flash_varlen(q, k, v, cu, max_len, scale, 0.0)
    if name == "cudnn":
        return lambda q, k, v, cu, cu_list, max_len, scale: _cudnn_varlen(q, k, v, cu, max_len, scale)
    if name in ("flex", "flex-tma"):
        return _flex_kernel({"USE_TMA": True} if name == "flex-tma" else None)

    def per_sequence(q, k, v, cu, cu_list, max_len, scale):  # verl's portable fallback
        k, v = (x.repeat_interleave(hq // hk, dim=1) for x in (k, v))
        return packing._segments_sdpa(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                      cu_list, scale, 0.0)[0]
    return per_sequence


def attention_flops(lens, hq: int, d: int, backward: bool) -> float:
    fwd = sum(4.0 * hq * d * s * (s + 1) / 2 for s in lens)
    return fwd * (3.5 if backward else 1.0)


def run(args) -> list[dict]:
    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    cfg = common.hf_config(args.arch)
    hq, hk = cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // hq
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    lens = lengths(args.tokens, args.prompt_len, args.response_len)
    n = sum(lens)
    cu_list = [0]
    for s in lens:
        cu_list.append(cu_list[-1] + s)
    cu = torch.tensor(cu_list, dtype=torch.int32, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(n, hq, d, device=device, dtype=dtype, generator=gen)
    k = torch.randn(n, hk, d, device=device, dtype=dtype, generator=gen)
    v = torch.randn(n, hk, d, device=device, dtype=dtype, generator=gen)
    g = torch.randn(n, hq, d, device=device, dtype=dtype, generator=gen)
    scale = d ** -0.5
    peak = common.peak_flops(device)
    rows = []
    for name in args.kernels:
        row = dict(kernel=name, arch=args.arch, sequences=len(lens), tokens=n, max_len=max(lens))
        try:
            kernel = packed_kernel(name, hq, hk)
            qi, ki, vi = (x.detach().clone().requires_grad_() for x in (q, k, v))

            def fwd():
                with torch.no_grad():
                    return kernel(qi, ki, vi, cu, cu_list, max(lens), scale)

            def fwd_bwd():
                out = kernel(qi, ki, vi, cu, cu_list, max(lens), scale)
                return torch.autograd.grad(out, (qi, ki, vi), g)

            out = kernel(qi, ki, vi, cu, cu_list, max(lens), scale)
            grads = torch.autograd.grad(out, (qi, ki, vi), g)
            row["max_err"] = float(f"{_max_error(out, grads, q, k, v, g, cu_list, scale, args.check_seqs):.3g}")
            t_f, _ = common.timed(fwd, device, repeats=1 + args.repeats)
            t_fb, _ = common.timed(fwd_bwd, device, repeats=1 + args.repeats)
            f_s, fb_s = min(t_f[1:]), min(t_fb[1:])
            row.update(fwd_ms=round(f_s * 1e3, 2), fwd_bwd_ms=round(fb_s * 1e3, 2), bwd_ms=round((fb_s - f_s) * 1e3, 2),
                       fwd_tflops=float(f"{attention_flops(lens, hq, d, False) / f_s / 1e12:.3g}"),
                       fwd_bwd_tflops=float(f"{attention_flops(lens, hq, d, True) / fb_s / 1e12:.3g}"))
        except Exception as exc:  # one kernel missing on this build must not lose the others
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        rows.append(row)
    base = next((r for r in rows if r["kernel"] == "flash" and "fwd_bwd_ms" in r), None)
    for r in rows:
        if base and "fwd_bwd_ms" in r:
            r["speedup_vs_flash"] = round(base["fwd_bwd_ms"] / r["fwd_bwd_ms"], 2)
    cols = ["kernel", "sequences", "tokens", "max_len", "fwd_ms", "bwd_ms", "fwd_bwd_ms", "fwd_tflops",
            "fwd_bwd_tflops", "speedup_vs_flash", "max_err", "error"]
    notes = (f"{args.arch} attention (Hq {hq}, Hk {hk}, D {d}), {dtype}; {len(lens)} sequences of prompt "
             f"{args.prompt_len[0]}-{args.prompt_len[1]} + response {args.response_len[0]}-{args.response_len[1]} "
             f"tokens packed into one row of {n}; best of {args.repeats} after one warm-up. max_err: largest "
             f"|difference| / (1 + |reference|) of output and gradients against per-sequence float32 SDPA on the "
             f"first {args.check_seqs} sequences. Peak {(peak or 0) / 1e12:.0f} TFLOP/s.")
    common.write_results(args.out, "packed_attention", info, rows, cols, extra=dict(args=vars(args)), notes=notes)
    return rows


def _max_error(out, grads, q, k, v, g, cu_list, scale, n_check: int) -> float:
    """Largest relative deviation of (out, dq, dk, dv) from float32 per-sequence SDPA over the
    first `n_check` sequences (their tokens are a prefix of the packed row)."""
    from verl.workers import packing

    end = cu_list[min(n_check, len(cu_list) - 1)]
    hq, hk = q.shape[1], k.shape[1]
    qr, kr, vr = (x[:end].detach().float().requires_grad_() for x in (q, k, v))
    rep = hq // hk
    ref = packing._segments_sdpa(qr.transpose(0, 1)[None], kr.repeat_interleave(rep, 1).transpose(0, 1)[None],
                                 vr.repeat_interleave(rep, 1).transpose(0, 1)[None], cu_list[:n_check + 1],
                                 scale, 0.0)[0]
    ref_grads = torch.autograd.grad(ref, (qr, kr, vr), g[:end].float())
    err = 0.0
    for a, b in zip((out,) + tuple(grads), (ref,) + tuple(ref_grads)):
        a = a[:end].detach().float()
        err = max(err, float(((a - b).abs() / (1 + b.abs())).max()))
    return err


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", "arch", "prompt_len", "response_len",
                           tiny={"help": "small CPU-sized problem (tiny-qwen2)"}, repeats=5,
                           out={"help": "directory for packed_attention.json / .md"})
    ap.add_argument("--tokens", type=int, default=32768, help="packed row length to fill")
    ap.add_argument("--kernels", nargs="+", default=["flash", "cudnn", "flex", "flex-tma", "sdpa"], choices=["flash", "cudnn", "flex", "flex-tma", "sdpa"])
    ap.add_argument("--check-seqs", type=int, default=4, help="sequences compared with the float32 reference")
    args = ap.parse_args(argv)
    if args.tiny:
        args.arch, args.tokens, args.prompt_len, args.response_len, args.repeats = "tiny-qwen2", 1024, [8, 32], [4, 192], 2
        args.kernels = ["sdpa"] if args.device == "cpu" else args.kernels
    return args


if __name__ == "__main__":
    run(parse())
