"""`verl plan CONFIG [overrides] [--card NAME|GB] [--prompt_tokens N]`: each stage's estimated
peak memory (verl/trainer/memory_plan.py) on a card, without training and without loading weights
(the model's config.json only). Exit 0 when it fits, 2 when not, with the line `verl train` would
refuse it with (verl/trainer/preflight.py)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

DESCRIPTION = ("Estimate each stage's peak GPU memory for a config (weights, gradients, optimizer, activations, "
               "logits, the engine) on this card or a named one, without loading weights. Exit 0 if it fits, "
               "2 if not (with the keys that would make it fit).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(parser, "config", nargs="?", default=None, help="YAML config; omit for the built-in default")
    add_flag(parser, "overrides", nargs="*", help="dotted overrides, e.g. model.lora.rank=16")
    add_flag(parser, "--card", default=None, metavar="NAME|GB",
             help="the card to plan for: h100 (79.1 GiB), h200 (139.8), a100-80, a100-40, l40s, a10g, 4090, or "
                  "GiB; default: this machine's CUDA device")
    add_flag(parser, "--prompt_tokens", type=int, default=None, metavar="N",
             help="prompt tokens per sequence (default data.max_prompt_length, the longest a prompt may be)")
    add_flag(parser, "--debug", action="store_true", help="show full tracebacks")


def _gpu_platform():
    """auto resolved as on a GPU with bfloat16 (a planned card): vLLM assumed installed there."""
    from verl.config.auto import Platform

    return Platform(gpu=True, bf16=True, vllm=True, sglang=importlib.util.find_spec("sglang") is not None)


def run(args: argparse.Namespace) -> int:
    from verl.config import load_config
    from verl.trainer import memory_plan
    from verl.trainer.preflight import MemoryRefused, plan_config, this_card

    config_path, overrides = args.config, list(args.overrides or [])
    if config_path and "=" in config_path and not os.path.exists(config_path):
        overrides.insert(0, config_path)  # `verl plan a.b=1` with no config file
        config_path = None
    if args.card is not None:
        try:
            card = memory_plan.card_bytes(args.card)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        config = load_config(config_path, overrides, platform=_gpu_platform())
    else:
        config = load_config(config_path, overrides)
        card = this_card(config)
        if card is None:
            print("error: no CUDA device here to plan for: pass --card h100, --card h200 or --card GIB",
                  file=sys.stderr)
            return 2
    p, facts, work = plan_config(config, *card, prompt_tokens=args.prompt_tokens)
    m = config.model
    print(f"model {m.name}: {facts.params / 1e9:.2f}B parameters"
          + (f", LoRA rank {m.lora.rank}: {work.lora_params(facts) / 1e6:.1f}M trained" if work.lora else
             f", full fine-tuning ({work.mixed_precision})")
          + f", {work.dtype}; rollout {work.engine}; card {card[1]}")
    print(f"step: {work.sequences} sequences x ({work.prompt_tokens} prompt + {work.response_tokens} response) "
          f"tokens; update micro-batches of up to {p.micro_tokens} tokens ({p.budget_key})")
    print(f"GiB, torch's allocator at each stage's peak:\n{memory_plan.table(p)}")
    for note in p.notes:
        print(f"note: {note}")
    verdict = "fits" if p.fits else ("the engine's pool is too small" if p.engine_short else "does not fit")
    print(f"peak: {p.peak.name} ~{memory_plan.gib(p.peak.total)} GiB + {memory_plan.gib(memory_plan.CONTEXT_BYTES)} "
          f"GiB CUDA context of {memory_plan.gib(card[0])} GiB: {verdict}")
    if p.fits:
        return 0
    line = memory_plan.refusal(p, memory_plan.fixes(facts, work, card[0]))
    print(f"error: {MemoryRefused(line)}", file=sys.stderr)
    return 2
