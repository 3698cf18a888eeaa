"""One flag style for every `verl` subcommand: `--snake_case` (the seed's spelling, as in
`--save_dir` and `--save_actor_only`, and the spelling of the config keys they set), with the
`--kebab-case` spelling accepted as an alias, so `--save-dir` and `--batch-size` work too."""

from __future__ import annotations

import argparse


def add_flag(parser: argparse.ArgumentParser, name: str, **kwargs) -> argparse.Action:
    """`parser.add_argument(name, alias, **kwargs)`: `name` in snake case ("--save_dir"); the
    kebab-case alias ("--save-dir") is added when it differs. Positional names pass through."""
    if not name.startswith("--"):
        return parser.add_argument(name, **kwargs)
    if "-" in name[2:]:
        raise ValueError(f"{name}: verl flags are spelled in snake case (the kebab case is the alias)")
    alias = "--" + name[2:].replace("_", "-")
    names = (name, alias) if alias != name else (name,)
    return parser.add_argument(*names, **kwargs)
