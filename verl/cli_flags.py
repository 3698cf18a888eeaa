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


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every `--flag` `parser` and the subcommand parsers it holds accept (only the commands that
    build_parser loaded: the command line's own)."""
    found = []
    for action in parser._actions:  # argparse keeps a parser's actions here; it has no public listing
        found += [s for s in action.option_strings if s.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += option_strings(sub)
    return found


def did_you_mean(option: str, parser: argparse.ArgumentParser) -> str:
    """'; did you mean --save_dir?' for a mistyped `option` (e.g. --save-dri), '' when nothing is close.
    Both spellings of a flag are candidates, and the suggestion keeps the style the user typed."""
    import difflib

    name = option.split("=", 1)[0]
    close = difflib.get_close_matches(name, sorted(set(option_strings(parser))), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


class VerlParser(argparse.ArgumentParser):
    """argparse's parser, whose 'unrecognized arguments' error also suggests the closest flag. Subcommand
    parsers are built with the parent's class, so every `verl` command gets it."""

    def error(self, message: str):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix) and message[len(prefix):].split():
            message += did_you_mean(message[len(prefix):].split()[0], self)
        super().error(message)
