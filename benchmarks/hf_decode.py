"""Decode loops over one transformers model: `generate` against verl's own loop.

Same bf16 model (random weights of a real architecture), same left-padded prompts, same
sampling (temperature 1, no top-k/top-p), every sequence forced to the full length
(generation_config.min_new_tokens = max_new_tokens, which both loops honour). Variants:

    generate          model.generate, DynamicCache (transformers' default)
    generate-static   model.generate with cache_implementation="static" and a fixed max_cache_len
                      (on CUDA transformers compiles the decode step: torch.compile, CUDA graphs)
    verl-eager        verl.rollout.decode_loop.StaticDecoder, each step run eagerly
    verl-graph        the same loop with the decode step captured as one CUDA graph (CUDA only)

Each call generates batch x max_new_tokens tokens; tokens/s is over the median of --repeats
timed calls after one warm-up call (the warm-up pays compile / capture). Ratios are against
`generate` and `generate-static` measured in the same run.

    python benchmarks/hf_decode.py --device cpu --tiny
    python benchmarks/hf_decode.py --device cuda --arch smollm2-135m --batch 128 --max-new-tokens 128
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import common  # noqa: E402

VARIANTS = ("generate", "generate-static", "verl-eager", "verl-graph")


def make_prompts(batch: int, lengths, vocab: int, device):
    """Left-padded random prompts with lengths uniform in [lo, hi]: (ids, mask), both (B, hi)."""
    gen = torch.Generator().manual_seed(0)
    lo, hi = lengths
    lens = torch.randint(lo, hi + 1, (batch,), generator=gen)
    ids = torch.randint(3, vocab, (batch, hi), generator=gen)
    mask = (torch.arange(hi)[None, :] >= (hi - lens)[:, None]).long()
    return (ids * mask).to(device), mask.to(device)


def run_variant(name, model, ids, mask, args, max_len, device):
    from transformers import GenerationConfig

    from verl.rollout.decode_loop import StaticDecoder

    if name.startswith("verl"):
        decoder = StaticDecoder(model, max_len, pad_id=0, eos_id=0, use_cuda_graph=name == "verl-graph")

        def call():
            return decoder.generate(ids, mask, args.max_new_tokens, temperature=1.0)[0]
    else:
        kwargs = dict(max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens, do_sample=True,
                      temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0, eos_token_id=0)
        if name == "generate-static":
            kwargs.update(cache_implementation="static", max_cache_len=max_len)
        config = GenerationConfig(**kwargs)

        def call():
            return model.generate(input_ids=ids, attention_mask=mask, generation_config=config)[:, ids.shape[1]:]

    times, out = common.timed(call, device, repeats=args.repeats + 1)
    return times[1:], times[0], out


def main(args):
    device = common.resolve_device(args.device)
    model = common.build_model(args.arch, device, dtype=torch.bfloat16).eval().requires_grad_(False)
    model.generation_config.min_new_tokens = args.max_new_tokens  # the verl loop reads it from here
    vocab = model.config.vocab_size
    ids, mask = make_prompts(args.batch, args.prompt_lengths, vocab, device)
    max_len = args.max_len or ids.shape[1] + args.max_new_tokens
    variants = [v for v in args.variants if v != "verl-graph" or device.type == "cuda"]
    info = common.machine_info(device)
    rows = []
    for name in variants:
        times, warmup, out = run_variant(name, model, ids, mask, args, max_len, device)
        seconds = statistics.median(times)
        rows.append(dict(variant=name, steps=int(out.shape[1]), seconds=round(seconds, 4),
                         ms_per_step=round(1000 * seconds / out.shape[1], 3),
                         tokens_per_s=round(args.batch * out.shape[1] / seconds), warmup_s=round(warmup, 2)))
        assert out.shape == (args.batch, args.max_new_tokens), (name, tuple(out.shape))
        common.free_memory(device)
    by_name = {r["variant"]: r["tokens_per_s"] for r in rows}
    for r in rows:
        for base in ("generate", "generate-static"):
            if base in by_name:
                r[f"x_{base}"] = round(r["tokens_per_s"] / by_name[base], 2)
    cols = ["variant", "steps", "seconds", "ms_per_step", "tokens_per_s", "x_generate", "x_generate-static",
            "warmup_s"]
    notes = (f"{args.arch} (random weights, bf16), batch {args.batch}, prompts {args.prompt_lengths[0]}-"
             f"{args.prompt_lengths[1]} tokens (left-padded), {args.max_new_tokens} new tokens each (forced), "
             f"sampling T=1; static cache of {max_len} slots; median of {args.repeats} calls after one warm-up call.")
    common.write_results(args.out, "hf_decode", info, rows, cols, extra=dict(args=vars(args)), notes=notes)
    return rows


def parse(argv=None):
    ap = common.arg_parser(__doc__, "device", "max_new_tokens", "repeats", "out", arch="smollm2-135m",
                           tiny={"help": "tiny-llama, batch 8, 16 new tokens (seconds on CPU)"})
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--prompt-lengths", type=int, nargs=2, default=[16, 48])
    ap.add_argument("--max-len", type=int, default=None,
                    help="static cache slots (default: prompt width + new tokens; a trainer sizes it for its "
                         "longest allowed prompt: data.max_prompt_length + max_new_tokens)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    args = ap.parse_args(argv)
    if args.tiny:
        args.arch, args.batch, args.max_new_tokens = "tiny-llama", 8, 16
    return args


if __name__ == "__main__":
    main(parse())
