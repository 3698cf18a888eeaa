"""`verl` command line.

    verl train [CONFIG.yaml] [a.b=value ...] [--save_dir DIR] [--save_actor_only | --save_full_state | --save_lora]
    verl data arithmetic --n N --out FILE       synthetic arithmetic prompts (train + held-out)
    verl models fetch smollm2-135m-instruct     a real small instruct model, offline-ready
    verl plot RUN_DIR [RUN_DIR ...]             PNG dashboard of one or more runs
    verl report RUN_DIR                         HTML report of a run
    verl train-rm --model M --train PAIRS.jsonl reward-model training (Bradley-Terry)

Bad input gives one line on stderr and exit code 2; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys



def _user_errors() -> tuple:
    from verl.config import ConfigError
    from verl.data.sources import DataError
    from verl.rewards.base import RewardError

    return (ConfigError, DataError, RewardError, FileNotFoundError)


OOM_HINT = ("out of memory. Knobs, cheapest first: training.micro_batch_size (smaller), "
            "model.enable_gradient_checkpointing: true, training.use_packed_samples: true, "
            "training.max_tokens_per_micro_batch, rollout.gpu_memory_utilization (lower), rollout.max_num_seqs "
            "(lower), training.offload_optimizer: true, model.lora.rank > 0")


def _train(args) -> int:
    from verl.config import load_config
    from verl.trainer import create_trainer

    overrides = list(args.overrides)
    if args.save_dir:
        overrides.append(f"checkpoint.save_dir={args.save_dir}")
    for flag, mode in (("save_actor_only", "actor"), ("save_full_state", "full"), ("save_lora", "lora")):
        if getattr(args, flag):
            overrides.append(f"checkpoint.save_mode={mode}")
    config = load_config(args.config, overrides)
    trainer = create_trainer(config)
    metrics = trainer.train()
    if metrics:
        print(f"final: reward={metrics['reward']:.4f} kl={metrics['kl']:.4f}; outputs in {trainer.output_dir}")
    return 0


def _delegate(module: str, argv: list[str]) -> int:
    import importlib

    return int(importlib.import_module(module).main(argv) or 0)


SUBCOMMANDS = {
    "data": ("verl.data.arithmetic", "arithmetic"),
    "models": ("verl.models.fetch", None),
    "plot": ("verl.tracking.plot", None),
    "report": ("verl.tracking.report", None),
    "train-rm": ("verl.rewards.train_rm", None),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")
    train = sub.add_parser("train", help="run RL training from a YAML config (defaults run with none)")
    train.add_argument("config", nargs="?", default=None, help="YAML config; omit for the built-in tiny default")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. training.lr=1e-5")
    train.add_argument("--save_dir", default=None, help="output/checkpoint folder (checkpoint.save_dir)")
    group = train.add_mutually_exclusive_group()
    group.add_argument("--save_actor_only", action="store_true", help="final save: actor HF folder (deployment)")
    group.add_argument("--save_full_state", action="store_true", help="final save: everything needed to resume")
    group.add_argument("--save_lora", action="store_true", help="final save: LoRA adapters only")
    train.add_argument("--debug", action="store_true", help="show full tracebacks")
    for name in SUBCOMMANDS:
        sub.add_parser(name, help=f"see 'verl {name} --help'", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        module, first = SUBCOMMANDS[argv[0]]
        rest = argv[1:]
        if first is not None:
            if not rest or rest[0] != first:
                print(f"usage: verl {argv[0]} {first} ...", file=sys.stderr)
                return 2
            rest = rest[1:]
        return _run_guarded(lambda: _delegate(module, rest), "--debug" in rest)
    parser = build_parser()
    # Overrides look like positional args; split config vs overrides ourselves.
    args, unknown = parser.parse_known_args(argv)
    if args.version:
        from verl import __version__

        print(__version__)
        return 0
    if args.command != "train":
        parser.print_help()
        return 0 if args.command is None else 2
    if unknown:
        bad = [u for u in unknown if u.startswith("--")]
        if bad:
            print(f"error: unknown option {bad[0]} (see 'verl train --help')", file=sys.stderr)
            return 2
        args.overrides = list(args.overrides) + unknown
    if args.config and "=" in args.config and not os.path.exists(args.config):
        args.overrides.insert(0, args.config)  # `verl train a.b=1` with no config file
        args.config = None
    return _run_guarded(lambda: _train(args), args.debug)


def _run_guarded(fn, debug: bool) -> int:
    """User mistakes -> one line, exit 2; divergence/OOM -> one line, exit 1."""
    if debug:
        return fn()
    try:
        return fn()
    except _user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - turned into one line, traceback with --debug
        from verl.trainer.errors import TrainingDiverged

        if isinstance(exc, TrainingDiverged):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if "out of memory" in str(exc).lower():
            print(f"error: {OOM_HINT}", file=sys.stderr)
            return 1
        print(f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              "(run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
