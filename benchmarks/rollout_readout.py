"""verl's own work after an engine call, without the engine: reading SGLang-shaped or vLLM-shaped
results into token and log-prob lists, then the rollout Batch (flat tensors, masks, positions, the
batch decode of the texts). This is the `around_engine_s` of benchmarks/rollout.py and
rollout_sglang.py, measured on the CPU alone and cut into its parts, so that a change to it can
be checked here before GPU time is spent on it.

    python benchmarks/rollout_readout.py                          # 64/256/1024 sequences x 256 tokens
    python benchmarks/rollout_readout.py --sequences 1024 --tokens 256 --repeats 7

The baseline row is the plain way to build the same two tensors (`torch.tensor` over a list
of all ids, and over a list of all log-probs, the form before 2026-12-01 session 5), timed in the same run
on the same lists. On the H200 on 2026-12-01 verl's seconds around SGLang's call were 0.026 s at
64 sequences and 0.181 s at 256 sequences of 256 tokens (this script, before the trim, on a 2-core CPU:
0.017 s and 0.050 s).
"""

from __future__ import annotations

import itertools
import random
import sys
import time

import torch

import common
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


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


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
        "baseline: torch.tensor(list(chain)) for ids and log-probs": lambda: (
            torch.tensor(list(itertools.chain.from_iterable(responses)), dtype=torch.long),
            torch.tensor(list(itertools.chain.from_iterable(log_probs)), dtype=torch.float32)),
    }
    rows = []
    for name, fn in parts.items():
        fn()  # warm
        rows.append({"sequences": n, "tokens": n * length, "part": name,
                     "seconds": round(best_of(fn, repeats), 4)})
    total = rows[0]["seconds"] + rows[1]["seconds"]
    rows.append({"sequences": n, "tokens": n * length, "part": "total (read + assemble)", "seconds": round(total, 4)})
    return rows


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__, "out")
    ap.add_argument("--sequences", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--tokens", type=int, default=256, help="response tokens per sequence")
    ap.add_argument("--repeats", type=int, default=5, help="best of this many")
    args = ap.parse_args(argv)
    tok = common.synthetic_tokenizer(49152)  # SmolLM2's vocabulary size, like random:smollm2
    rows = []
    for n in args.sequences:
        rows += measure(n, args.tokens, args.repeats, tok)
        for r in rows[-5:]:
            print(f"{r['sequences']:5d} x {args.tokens}  {r['part']:58s} {r['seconds']:.4f} s", flush=True)
    info = common.machine_info(torch.device("cpu"))
    common.write_results(args.out or "benchmarks/results", "rollout_readout", info, rows,
                         ["sequences", "tokens", "part", "seconds"],
                         extra={"command": "python3 benchmarks/rollout_readout.py " + " ".join(sys.argv[1:])},
                         notes=f"CPU only, no engine; best of {args.repeats}; synthetic SGLang-shaped results, "
                               f"{args.tokens} tokens per sequence, 64-token prompts, a 49,152-token BPE tokenizer.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
