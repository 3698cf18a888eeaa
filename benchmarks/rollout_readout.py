"""verl's own work after an engine call, without the engine: reading SGLang-shaped or vLLM-shaped
results into token and log-prob lists, then the rollout Batch (flat tensors, masks, positions, the
batch decode of the texts). This is the `around_engine_s` of benchmarks/rollout.py and
rollout_sglang.py, measured on the CPU alone and cut into its parts, so that a change to it can
be checked here before GPU time is spent on it.

    python benchmarks/rollout_readout.py                          # 64/256/1024 sequences x 256 tokens
    python benchmarks/rollout_readout.py --sequences 1024 --tokens 256 --repeats 7
    python benchmarks/rollout_readout.py --busy 1     # beside one busy-spinning process, as SGLang's scheduler

The baseline row is the plain way to build the same two tensors (`torch.tensor` over a list
of all ids, and over a list of all log-probs, the form before 2026-12-01), timed in the same run
on the same lists. On the H200 on 2026-12-01 verl's seconds around SGLang's call were 0.026 s at
64 sequences and 0.181 s at 256 sequences of 256 tokens (this script, before the trim, on a 2-core CPU:
0.017 s and 0.050 s). On 2026-12-01 this script on the H200 host's own CPU, with no engine in
the process, took 0.013 s and 0.028 s: the host is not slow at this work; inside the SGLang run something
else costs the difference. The likely cause, measured here with --busy: torch's OpenMP pool (and the
tokenizer's Rust pool beside it) wait for their threads at every op, and a process spinning on a core
(SGLang's scheduler) makes each wait a time slice. The row "the same Batch with torch's ops" is
assemble_rollout as it was before it built its arrays in numpy, timed in the same run.
"""

from __future__ import annotations

import itertools
import multiprocessing
import random
import statistics
import sys
import time

import numpy as np
import torch

import common
from synthetic_tokenizer import synthetic_tokenizer
from verl.batch import Batch
from verl.rollout.base import assemble_rollout
from verl.rollout.sglang_rollout import response_of
from verl.rollout.token_io import RustBatchDecode


def sglang_results(n: int, length: int, vocab: int, seed: int = 0) -> list[dict]:
    """n results as SGLang's Engine.generate returns them with return_logprob: output ids and
    (log-prob, token id, None) triples per token."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ids = [rng.randrange(300, vocab - 1) for _ in range(length)]
        out.append({"text": "", "output_ids": ids,
                    "meta_info": {"output_token_logprobs": [(-rng.random(), t, None) for t in ids],
                                  "finish_reason": {"type": "length", "length": length}}})
    return out


def timings(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def assemble_with_torch_ops(prompts: Batch, responses, log_probs, tokenizer) -> tuple:
    """The baseline: assemble_rollout's arrays as it built them before 2026-12-01, with torch's
    masked scatter, cat and cumsum (its OpenMP pool), plus the same batch decode."""
    n, resp_len = len(responses), max(len(r) for r in responses)
    lengths = [len(r) for r in responses]
    filled = torch.arange(resp_len)[None, :] < torch.tensor(lengths, dtype=torch.long).view(n, 1)
    resp_ids = torch.full((n, resp_len), 0, dtype=torch.long)
    resp_logp = torch.zeros((n, resp_len), dtype=torch.float32)
    total = sum(lengths)
    resp_ids[filled] = torch.from_numpy(np.fromiter(itertools.chain.from_iterable(responses), np.int64, total))
    resp_logp[filled] = torch.from_numpy(np.fromiter(itertools.chain.from_iterable(log_probs), np.float32, total))
    attention_mask = torch.cat([prompts.attention_mask, filled.long()], dim=1)
    input_ids = torch.cat([prompts.input_ids, resp_ids], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0) * attention_mask
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    return input_ids, position_ids, resp_logp, filled.float(), texts


def _spin() -> None:
    while True:
        pass


def busy_neighbours(count: int) -> list:
    """`count` processes that spin on a core each until terminated: an engine's busy-polling
    scheduler beside verl's readout."""
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for p in procs:
        p.start()
    time.sleep(0.2 if procs else 0)
    return procs


def measure(n: int, length: int, repeats: int, tok, prompt_len: int = 64) -> list[dict]:
    results = sglang_results(n, length, tok.vocab_size)
    prompts = Batch(input_ids=torch.randint(300, 4000, (n, prompt_len)),
                    attention_mask=torch.ones(n, prompt_len, dtype=torch.long))
    read = [response_of(r, i) for i, r in enumerate(results)]
    responses, log_probs, finished = ([r[k] for r in read] for k in range(3))
    decoder = RustBatchDecode(tok)
    parts = {
        "read SGLang results (response_of)": lambda: [response_of(r, i) for i, r in enumerate(results)],
        "assemble_rollout (tensors + decode)": lambda: assemble_rollout(prompts, responses, log_probs, decoder,
                                                                         length, finished=finished),
        "  of which: batch decode of the texts": lambda: decoder.batch_decode(responses, skip_special_tokens=True),
        "baseline: the same Batch with torch's ops (before 2026-12-01)": lambda: assemble_with_torch_ops(
            prompts, responses, log_probs, decoder),
        "baseline: torch.tensor(list(chain)) for ids and log-probs": lambda: (
            torch.tensor(list(itertools.chain.from_iterable(responses)), dtype=torch.long),
            torch.tensor(list(itertools.chain.from_iterable(log_probs)), dtype=torch.float32)),
    }
    for fn in parts.values():
        fn()  # warm
    # Interleaved rounds, the order rotated each round, so drift in the machine's load (and a busy
    # neighbour's time slices) fall on every part alike.
    times = {name: [] for name in parts}
    names = list(parts)
    for k in range(repeats):
        for name in names[k % len(names):] + names[:k % len(names)]:
            times[name] += timings(parts[name], 1)
    rows = [{"sequences": n, "tokens": n * length, "part": name, "seconds": round(min(t), 4),
             "median_s": round(statistics.median(t), 4)} for name, t in times.items()]
    total = {k: round(rows[0][k] + rows[1][k], 4) for k in ("seconds", "median_s")}
    rows.append({"sequences": n, "tokens": n * length, "part": "total (read + assemble)", **total})
    return rows


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__, "out")
    ap.add_argument("--sequences", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--tokens", type=int, default=256, help="response tokens per sequence")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per part (best and median reported)")
    ap.add_argument("--busy", type=int, default=0,
                    help="processes spinning on a core each while it measures (an engine's busy scheduler)")
    args = ap.parse_args(argv)
    tok = synthetic_tokenizer(49152)  # SmolLM2's vocabulary size, like random:smollm2
    rows = []
    neighbours = busy_neighbours(args.busy)
    try:
        for n in args.sequences:
            rows += measure(n, args.tokens, args.repeats, tok)
            for r in rows[-6:]:
                print(f"{r['sequences']:5d} x {args.tokens}  {r['part']:58s} {r['seconds']:.4f} s "
                      f"(median {r['median_s']:.4f})", flush=True)
    finally:
        for p in neighbours:
            p.terminate()
            p.join(timeout=5)
    info = common.machine_info(torch.device("cpu"))
    common.write_results(args.out or "benchmarks/results", "rollout_readout", info, rows,
                         ["sequences", "tokens", "part", "seconds", "median_s"],
                         extra={"command": "python3 benchmarks/rollout_readout.py " + " ".join(sys.argv[1:])},
                         notes=f"CPU only, no engine; seconds = best, median_s = median of {args.repeats} "
                               f"interleaved rounds; "
                               f"{args.busy} busy-spinning neighbour processes; synthetic SGLang-shaped results, "
                               f"{args.tokens} tokens per sequence, 64-token prompts, a 49,152-token BPE tokenizer.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
