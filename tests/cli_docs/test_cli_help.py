"""The command line: real --help for every command, one flag style with the other spelling as an
alias, did-you-mean for a mistyped command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from verl.cli import SUBCOMMANDS, build_parser, main

# Each command and an option its help must list (so a placeholder parser fails the test).
HELP_CASES = [
    ([], "COMMAND"),
    (["train"], "--save_dir"),
    (["data"], "arithmetic"),
    (["data", "arithmetic"], "--val_fraction"),
    (["models"], "fetch"),
    (["models", "fetch"], "--cache_dir"),
    (["models", "list"], "--cache_dir"),
    (["plan"], "--card"),
    (["plot"], "RUN_DIR"),
    (["report"], "RUN_DIR"),
    (["train-rm"], "--batch_size"),
]


def test_every_command_is_covered():
    assert {case[0][0] for case in HELP_CASES if case[0]} == {"train", *SUBCOMMANDS}


@pytest.mark.parametrize("argv, option", HELP_CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_help_of_every_command(argv, option, capsys):
    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: verl{' ' if argv else ''}{' '.join(argv)}")
    assert option in out


def test_verl_help_lists_commands_and_needs_no_torch():
    code = ("import sys; from verl.cli import main; main(['--help']); "
            "assert 'torch' not in sys.modules, 'verl --help imported torch'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("train", *SUBCOMMANDS):
        assert name in proc.stdout


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "usage: verl" in capsys.readouterr().out


def test_unknown_command_suggests(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("verl: error: unknown command 'trian' (choose from train, data, models, plan, plot, report, "
                           "train-rm); did you mean 'train'?")


@pytest.mark.parametrize("argv", [
    ["train", "--save_dir", "D", "--save_full_state", "--resume_force"],
    ["train", "--save-dir", "D", "--save-full-state", "--resume-force"],
])
def test_train_flags_in_both_spellings(argv):
    args, _ = build_parser("train").parse_known_args(argv)
    assert (args.save_dir, args.save_full_state, args.resume_force) == ("D", True, True)


@pytest.mark.parametrize("flag", ["--batch_size", "--batch-size"])
def test_train_rm_flags_in_both_spellings(flag):
    args = build_parser("train-rm").parse_args(["train-rm", "--model", "m", "--train", "t", "--out", "o", flag, "3"])
    assert args.batch_size == 3


def test_data_flags_in_both_spellings(tmp_path):
    for flag in ("--val_fraction", "--val-fraction"):
        out = tmp_path / f"a{flag}.jsonl"
        assert main(["data", "arithmetic", "--n", "10", "--out", str(out), flag, "0.2"]) == 0
        assert len(out.read_text().splitlines()) == 8  # 10 problems, 2 held out


def test_usage_error_exits_2(capsys):
    assert main(["data", "arithmetic"]) == 2  # --out is required
    assert "--out" in capsys.readouterr().err
