"""`verl` command line.

    verl train [CONFIG.yaml] [a.b=value ...] [--save_dir DIR] [--save_actor_only | --save_full_state | --save_lora]
               [--resume auto|PATH|none] [--resume_force]
    verl data arithmetic --n N --out FILE       synthetic arithmetic prompts (train + held-out)
    verl models fetch smollm2-135m-instruct     a real small instruct model, offline-ready
    verl plot RUN_DIR [RUN_DIR ...]             PNG dashboard of one or more runs
    verl report RUN_DIR                         HTML report of a run
    verl train-rm --model M --train PAIRS.jsonl reward-model training (Bradley-Terry)

Bad input gives one line on stderr and exit code 2; `--debug` shows the traceback.
SIGINT/SIGTERM during `verl train` finish the current step, save the full state and exit 0
(a second Ctrl-C exits at once); divergence (NaN/Inf) and out-of-memory exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys



def _user_errors() -> tuple:
    from verl.config import ConfigError

    errors = [ConfigError, FileNotFoundError]
    # An error class whose module was never imported cannot have been raised; skipping it keeps
    # a config typo from importing torch just to print one line.
    for module, name in (("verl.data.sources", "DataError"), ("verl.rewards.base", "RewardError")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


OOM_HINT = ("out of memory. Knobs, cheapest first: training.micro_batch_size (smaller), "
            "model.enable_gradient_checkpointing: true, training.use_packed_samples: true, "
            "training.max_tokens_per_micro_batch, rollout.gpu_memory_utilization (lower), rollout.max_num_seqs "
            "(lower), training.offload_optimizer: true, model.lora.rank > 0")


def _train(args) -> int:
    import json

    from verl.config import load_config

    overrides = list(args.overrides)
    if args.save_dir:
        overrides.append(f"checkpoint.save_dir={json.dumps(args.save_dir)}")  # quoted: any path is a string
    for flag, mode in (("save_actor_only", "actor"), ("save_full_state", "full"), ("save_lora", "lora")):
        if getattr(args, flag):
            overrides.append(f"checkpoint.save_mode={mode}")
    if args.resume is not None:
        overrides.append(f"checkpoint.resume={json.dumps(args.resume)}")
    if args.resume_force:
        overrides.append("checkpoint.resume_force=true")
    config = load_config(args.config, overrides)  # config errors answer before torch is imported
    from verl.trainer import create_trainer
    from verl.trainer.resume import resolve_resume
    from verl.trainer.signals import GracefulStop, StopTraining

    point = resolve_resume(config)  # before loading any model: a finished run or a bad resume answers at once
    if point.finished:
        print(point.note)
        return 0
    with GracefulStop():
        trainer = create_trainer(config)
        try:
            metrics = trainer.train()
        except StopTraining as stop:
            print(str(stop))
            return 0
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
    train.add_argument("--resume", default=None, metavar="auto|PATH|none",
                       help="continue from the newest full checkpoint in save_dir (auto), a checkpoint folder "
                            "(PATH), or start over (none); checkpoint.resume")
    train.add_argument("--resume_force", action="store_true",
                       help="resume even if the config changed in ways that change training")
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


def _is_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return (oom_type is not None and isinstance(exc, oom_type)) or "out of memory" in str(exc).lower()


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
        from verl.trainer.checkpoint import CheckpointError
        from verl.trainer.errors import TrainingDiverged

        if isinstance(exc, CheckpointError):  # a missing/corrupted/refused checkpoint: bad input
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, TrainingDiverged):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if _is_oom(exc):
            print(f"error: {OOM_HINT}", file=sys.stderr)
            return 1
        print(f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              "(run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
