"""`verl` command line.

    verl train [CONFIG.yaml] [a.b=value ...] [--save_dir DIR] [--save_actor_only | --save_full_state | --save_lora]
               [--resume auto|PATH|none] [--resume_force] [--overwrite]
    python3 -m verl.trainer.main_ppo key=value ...  real verl's entry point and keys (docs/real_verl.md)
    verl data arithmetic --n N --out FILE       synthetic arithmetic prompts (train + held-out)
    verl models fetch smollm2-135m-instruct     a real small instruct model, offline-ready
    verl plan [CONFIG.yaml] [a.b=value ...] [--card h100|h200|GB]  per-stage memory estimate, no training
    verl plot RUN_DIR [RUN_DIR ...]             PNG dashboard of one or more runs
    verl report RUN_DIR                         HTML report of a run
    verl train-rm --model M --train PAIRS.jsonl reward-model training (Bradley-Terry)

Flags are spelled --snake_case (the seed's --save_dir); --kebab-case works too (verl/cli_flags.py).
Bad input gives one line on stderr and exit code 2; `--debug` shows the traceback.
SIGINT/SIGTERM during `verl train` stop within checkpoint.stop_grace_s: the last completed step's
full state is saved and the exit code is 0; past the limit (or on a second signal) the exit is
forced with 128 + the signal number (verl/signals.py). Divergence (NaN/Inf) and
out-of-memory exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from verl.trainer.launch import OOM_HINT, run_guarded, run_training  # noqa: F401  (light: torch loads only to train)


def _train(args) -> int:
    """`verl train`: its flags become config overrides, then run_training."""
    import json

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
    if args.overwrite:
        overrides.append("checkpoint.overwrite=true")
    return run_training(args.config, overrides)


# The subcommands besides `train`: name -> (module, help line). A module provides
# add_arguments(parser) and run(args); it is imported only when its command runs (or its help
# is asked for), so `verl --help` and config errors answer without importing torch.
SUBCOMMANDS = {
    "data": ("verl.data.arithmetic", "make prompt datasets: 'verl data arithmetic --n N --out FILE', 'verl data gsm8k'"),
    "models": ("verl.models.fetch", "fetch real small models for offline use: 'verl models fetch NAME', 'verl models list'"),
    "plan": ("verl.trainer.plan_command", "estimate each stage's peak GPU memory without training: 'verl plan CONFIG [--card h100]'"),
    "plot": ("verl.tracking.plot", "PNG dashboard of one or more runs: 'verl plot RUN_DIR [RUN_DIR ...]'"),
    "report": ("verl.tracking.report", "self-contained HTML report of a run: 'verl report RUN_DIR'"),
    "train-rm": ("verl.rewards.train_rm", "train a Bradley-Terry reward model on preference pairs"),
}
# Commands with commands of their own: `verl data arithmetic`, `verl models fetch|list`.
DATA_COMMANDS = {  # name -> (module with add_arguments / run / DESCRIPTION, help line)
    "arithmetic": ("verl.data.arithmetic", "synthetic arithmetic problems with answers (train + held-out files)"),
    "gsm8k": ("verl.data.gsm8k_layout", "GSM8K-style rows in real verl's parquet layout (~/data/gsm8k), offline"),
}

TRAIN_EPILOG = """\
overrides are dotted config keys (see the README's configuration reference), e.g.
  verl train examples/quickstart.yaml training.total_steps=10 rollout.max_new_tokens=16
  verl train algorithm.name=grpo reward_fn.type=keyword reward_fn.keywords=[love]   (no file: built-in defaults)
  verl train examples/quickstart.yaml --save_dir runs/a --resume auto
Relative paths in a config file are read from the file's folder, then from the working directory.
Bad input: one line naming the key or file, exit 2. SIGINT/SIGTERM: the full state is saved, exit 0."""


def _add_train_arguments(train: argparse.ArgumentParser) -> None:
    from verl.cli_flags import add_flag

    add_flag(train, "config", nargs="?", default=None, help="YAML config; omit for the built-in tiny default")
    add_flag(train, "overrides", nargs="*", help="dotted overrides, e.g. training.lr=1e-5")
    add_flag(train, "--save_dir", default=None, help="output/checkpoint folder (checkpoint.save_dir)")
    group = train.add_mutually_exclusive_group()
    add_flag(group, "--save_actor_only", action="store_true", help="final save: actor HF folder (deployment)")
    add_flag(group, "--save_full_state", action="store_true", help="final save: everything needed to resume")
    add_flag(group, "--save_lora", action="store_true", help="final save: LoRA adapters only")
    add_flag(train, "--resume", default=None, metavar="auto|PATH|none",
             help="continue from the newest full checkpoint in save_dir (auto), a checkpoint folder "
                  "(PATH), or start over (none); checkpoint.resume")
    add_flag(train, "--resume_force", action="store_true",
             help="resume even if the config changed in ways that change training")
    add_flag(train, "--overwrite", action="store_true",
             help="start a new run in a save_dir that holds an earlier one, moving that one to "
                  "previous_run_N/ (checkpoint.overwrite); without it such a run is refused")
    add_flag(train, "--debug", action="store_true", help="show full tracebacks")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `verl` parser. Only `command`'s own options are loaded (its module imported)."""
    from verl.cli_flags import VerlParser

    parser = VerlParser(
        prog="verl", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Reinforcement-learning post-training for language models (PPO, GRPO, RLOO, DAPO, ...).",
        epilog="Run 'verl COMMAND --help' for a command's options. Start with: verl train examples/quickstart.yaml\n"
               "Real verl's command line: python3 -m verl.trainer.main_ppo key=value ... (docs/real_verl.md)")
    parser.add_argument("--version", action="store_true", help="print the versions of verl, torch, vLLM and CUDA and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    train = sub.add_parser("train", help="run RL training", formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Run RL training from a YAML config and dotted overrides.",
                           epilog=TRAIN_EPILOG)
    if command in (None, "train"):
        _add_train_arguments(train)
    for name, (module, help_line) in SUBCOMMANDS.items():
        cmd = sub.add_parser(name, help=help_line, description=help_line)
        if name != command:
            continue
        mod = importlib.import_module(module)
        if name == "data":
            inner = cmd.add_subparsers(dest="data_command", metavar="{" + ",".join(DATA_COMMANDS) + "}", required=True)
            for leaf_name, (leaf_module, leaf_help) in DATA_COMMANDS.items():
                leaf_mod = importlib.import_module(leaf_module)
                leaf = inner.add_parser(leaf_name, help=leaf_help, description=leaf_mod.DESCRIPTION)
                leaf_mod.add_arguments(leaf)
                leaf.set_defaults(run=leaf_mod.run)
        elif name == "models":
            inner = cmd.add_subparsers(dest="models_command", metavar="{fetch,list,hybrid-vl}", required=True)
            for leaf_name, (leaf_help, add, run) in mod.COMMANDS.items():
                leaf = inner.add_parser(leaf_name, help=leaf_help, description=leaf_help)
                add(leaf)
                leaf.set_defaults(run=run)
        else:
            cmd.description = getattr(mod, "DESCRIPTION", help_line)
            mod.add_arguments(cmd)
            cmd.set_defaults(run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    names = ["train", *SUBCOMMANDS]
    if command is not None and command not in names:
        import difflib

        close = difflib.get_close_matches(command, names, n=1, cutoff=0.6)
        print(f"verl: error: unknown command '{command}' (choose from {', '.join(names)})"
              + (f"; did you mean '{close[0]}'?" if close else ""), file=sys.stderr)
        return 2
    parser = build_parser(command)
    if command in SUBCOMMANDS:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
            return int(exc.code or 0)
        return run_guarded(lambda: int(args.run(args) or 0), "--debug" in argv)
    try:
        # Overrides look like positional args; split config vs overrides ourselves.
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.version:
        from verl.version import describe

        print(describe())  # verl, torch, vllm, cuda: the same values as the Docker images' ai.verl.* labels
        return 0
    if args.command != "train":
        parser.print_help()
        return 0
    if unknown:
        bad = [u for u in unknown if u.startswith("--")]
        if bad:
            from verl.cli_flags import did_you_mean

            print(f"error: unknown option {bad[0]}{did_you_mean(bad[0], parser)} (see 'verl train --help')",
                  file=sys.stderr)
            return 2
        args.overrides = list(args.overrides) + unknown
    if args.config and "=" in args.config and not os.path.exists(args.config):
        args.overrides.insert(0, args.config)  # `verl train a.b=1` with no config file
        args.config = None
    return run_guarded(lambda: _train(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
