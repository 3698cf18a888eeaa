"""What vLLM's decoding of log-prob tokens costs per generated token, without an engine.

    python3 benchmarks/logprob_detokenize.py --tokens 16000 --out benchmarks/results/cpu/logprob_detokenize

A request with logprobs=0 gets, for each generated token, its log-prob and, when the request detokenizes (vLLM's
default, TRL's requests), that token's text: vLLM's LogprobsProcessor._update_sample_logprobs decodes it
(convert_ids_list_to_tokens) and, for text ending in U+FFFD, decodes again with up to 4 sampled tokens of
context (_verify_tokens). verl's requests carry detokenize=False (no tokenizer reaches that processor). This
script feeds the installed vLLM's own LogprobsProcessor one sampled token at a time, ids drawn uniformly (as a
random model samples them), with and without a tokenizer, for: the benchmarks' synthetic tokenizer at Qwen's
vocabulary (benchmarks/synthetic_tokenizer.py), SmolLM2-135M-Instruct's real tokenizer when verl's model
cache has it, and a synthetic tokenizer filled to all 151,936 ids with byte triples (what random bytes cost).
The row `detok_us - no_detok_us` is the Python work a detokenizing request adds per token, on this CPU, on the
engine's output loop (in-process: the same thread as the engine's steps).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from synthetic_tokenizer import synthetic_tokenizer  # noqa: E402


def per_token_us(tokenizer, vocab: int, tokens: int, seed: int = 0) -> float:
    """Microseconds per generated token of LogprobsProcessor._update_sample_logprobs (tokenizer None: no decoding)."""
    from vllm.logprobs import create_sample_logprobs
    from vllm.v1.engine.logprobs import LogprobsProcessor
    from vllm.v1.outputs import LogprobsLists

    def processor():
        return LogprobsProcessor(tokenizer=tokenizer, cumulative_logprob=0.0, logprobs=create_sample_logprobs(True),
                                 prompt_logprobs=None, num_prompt_logprobs=None, num_logprobs=0)

    def steps(n: int, rng_seed: int) -> list:
        ids = np.random.default_rng(rng_seed).integers(0, vocab, size=n)
        return [LogprobsLists(np.array([[i]]), np.array([[-1.0]], dtype=np.float32), np.array([1]), None) for i in ids]

    # Warm-up on other ids first: the tokenizer's first decodes carry one-time costs (~50 ms on the 2-core CPU),
    # which an engine pays once, not per token; timed without it, 4000 tokens read ~2x the steady cost.
    warm = processor()
    for lists in steps(2000, seed + 1):
        warm._update_sample_logprobs(lists)
    proc, timed = processor(), steps(tokens, seed)
    t0 = time.perf_counter()
    for lists in timed:  # one token a step, as the engine's output loop hands them over
        proc._update_sample_logprobs(lists)
    return (time.perf_counter() - t0) / tokens * 1e6


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__, out="benchmarks/results/cpu/logprob_detokenize")
    ap.add_argument("--tokens", type=int, default=16000, help="sampled tokens per row (after 2000 of warm-up)")
    ap.add_argument("--vocab", type=int, default=151936, help="ids drawn from [0, vocab) (Qwen2.5's 151,936)")
    args = ap.parse_args(argv)
    import vllm

    import torch

    info = common.machine_info(torch.device("cpu"))
    info["vllm"] = vllm.__version__
    from verl.models.fetch import is_fetched, model_dir

    tokenizers = [("synthetic (the benchmarks')", synthetic_tokenizer(args.vocab), args.vocab),
                  ("synthetic filled with byte triples", synthetic_tokenizer(args.vocab, triples=True),
                   args.vocab)]
    if is_fetched("smollm2-135m-instruct"):
        from transformers import AutoTokenizer

        real_tok = AutoTokenizer.from_pretrained(model_dir("smollm2-135m-instruct"))
        tokenizers.append(("SmolLM2-135M-Instruct (real)", real_tok, len(real_tok)))
    else:
        print("logprob_detokenize: SmolLM2-135M-Instruct is not fetched (verl models fetch smollm2-135m-instruct): "
              "its row is left out")
    rows = []
    for name, tok, vocab in tokenizers:
        detok, plain = per_token_us(tok, vocab, args.tokens), per_token_us(None, vocab, args.tokens)
        rows.append(dict(tokenizer=name, tokenizer_size=len(tok), ids_drawn_from=vocab, detok_us=round(detok, 1),
                         no_detok_us=round(plain, 1), added_us=round(detok - plain, 1),
                         added_s_per_131k_tokens=round((detok - plain) * 131072 / 1e6, 2)))
    notes = ("us per generated token in vLLM's LogprobsProcessor (logprobs=0), ids uniform; added_s_per_131k_tokens: "
             "what it adds to a step of work (b), 256 x 512 tokens, at this CPU's speed.")
    common.write_results(args.out, "logprob_detokenize", info, rows, list(rows[0]), notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
