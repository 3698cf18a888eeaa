"""The chunked LM head's softmax math (verl.workers.logprobs), per logits chunk, by compile mode.

For one (rows, vocab) bf16 logits chunk, times the two per-chunk functions the head runs:

    stats   log p(y), logsumexp (and entropy) from the chunk        (forward)
    grad    dL/dz written over the chunk in place                     (backward, keep_logits)

eager, torch.compile with dynamic=True (rows and vocabulary symbolic), and what verl uses with
`model.torch_compile` (automatic-dynamic shapes and 2-D tiles: the vocabulary stays a constant).
A second, shorter chunk is run first through each compiled function, as the tail chunk of an
update does, so the timed full chunk runs the graph a training step would. Every mode's
gradient is checked against eager. Bandwidth counts one read and one write of the chunk.

    python benchmarks/head_math.py --device cuda                 # 4096 x 151936 (Qwen2 vocabulary)
    python benchmarks/head_math.py --device cpu --tiny
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import common  # noqa: E402

MODES = ("eager", "dynamic", "verl")


def run(args) -> list[dict]:
    from verl.workers import logprobs

    device = common.resolve_device(args.device)
    info = common.machine_info(device)
    n, v = args.rows, args.vocab
    gen = torch.Generator(device=device).manual_seed(0)
    z0 = torch.randn(n, v, device=device, dtype=torch.bfloat16, generator=gen)
    targets = torch.randint(0, v, (n,), device=device, generator=gen)
    g = torch.randn(n, device=device, generator=gen)
    lse = torch.logsumexp(z0.float(), dim=-1)
    ref = z0.clone()
    logprobs._chunk_grad_(ref, targets, lse, lse, g, None, 1.0)
    tail = max(1, n * 3 // 10)
    rows = []
    for mode in args.modes:
        torch._dynamo.reset()
        if mode == "eager":
            stats, grad = logprobs._chunk_stats, logprobs._chunk_grad_
        elif mode == "dynamic":
            stats = torch.compile(logprobs._chunk_stats, dynamic=True)
            grad = torch.compile(logprobs._chunk_grad_, dynamic=True)
        else:
            logprobs._COMPILED.clear()
            stats, grad = logprobs._kernels(True)
        z = z0.clone()
        grad(z, targets, lse, lse, g, None, 1.0)
        err = float((z.float() - ref.float()).abs().max())
        zt = z0[:tail].clone()
        grad(zt, targets[:tail], lse[:tail], lse[:tail], g[:tail], None, 1.0)  # the tail chunk's shape
        stats(z0[:tail], targets[:tail], 1.0, False)
        t_grad, _ = common.timed(lambda: grad(z, targets, lse, lse, g, None, 1.0), device, repeats=1 + args.repeats)
        t_stats, _ = common.timed(lambda: stats(z0, targets, 1.0, False), device, repeats=1 + args.repeats)
        gs, ss = min(t_grad[1:]), min(t_stats[1:])
        rows.append(dict(mode=mode, rows=n, vocab=v, grad_ms=round(gs * 1e3, 3), stats_ms=round(ss * 1e3, 3),
                         grad_tb_per_s=round(2 * n * v * 2 / gs / 1e12, 2), grad_max_diff=err))
    cols = ["mode", "rows", "vocab", "grad_ms", "grad_tb_per_s", "stats_ms", "grad_max_diff"]
    notes = (f"One ({n}, {v}) bf16 logits chunk; best of {args.repeats} after a warm-up; a {tail}-row chunk ran "
             f"first through each compiled function. grad_max_diff: against the eager gradient.")
    common.write_results(args.out, "head_math", info, rows, cols, extra=dict(args=vars(args)), notes=notes)
    return rows


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", tiny={"help": "CPU-sized chunk (256 x 4096)"}, repeats=10,
                           out={"help": "directory for head_math.json / .md"})
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = ap.parse_args(argv)
    if args.tiny:
        args.rows, args.vocab, args.repeats = 256, 4096, 3
    return args


if __name__ == "__main__":
    run(parse())
