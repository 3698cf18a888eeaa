"""benchmarks/h200_run.sh, the GPU runner, and its stage table benchmarks/gpu/stages.tsv.

The runner is checked on the CPU with a table of its own (shell one-liners standing in for GPU stages):
stages run in order under the budget, one that needs more than is left is skipped, a failing one is
logged with its exit code and the next still runs, a pattern row matches many names, an unknown name
makes the exit code 2, a background stage is waited for, and every log comes back in the archive.
The real table is checked for shape: four fields a row, unique names, seconds that evaluate to whole
numbers, and commands that start with a program or a function of benchmarks/gpu/functions.sh.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "benchmarks" / "h200_run.sh"
TABLE = ROOT / "benchmarks" / "gpu" / "stages.tsv"
FUNCTIONS = ROOT / "benchmarks" / "gpu" / "functions.sh"


def rows(path: Path) -> list[list[str]]:
    return [line.rstrip("\n").split("\t") for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def run_runner(tmp_path: Path, *args: str, table: Path | None = None, env: dict | None = None):
    full = dict(os.environ, OUT=str(tmp_path / "out"), H200_RESULTS=str(tmp_path / "h200_results"),
                SITE=str(tmp_path / "site"), PY=sys.executable, **(env or {}))
    if table is not None:
        full["GPU_STAGES"] = str(table)
    return subprocess.run(["bash", str(RUNNER), *args], env=full, capture_output=True, text=True, timeout=120)


def test_every_row_has_four_fields_and_a_unique_name():
    table = rows(TABLE)
    assert len(table) > 40
    for row in table:
        assert len(row) == 4 and all(field.strip() for field in row), row
    names = [row[0] for row in table]
    assert len(names) == len(set(names))


def test_every_stages_seconds_evaluate_to_whole_seconds(tmp_path):
    listed = run_runner(tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    needs = dict(re.match(r"(\S+)\s+(\S+)", line).groups() for line in listed.stdout.splitlines())
    assert set(needs) == {row[0] for row in rows(TABLE)}
    assert all(value.isdigit() for value in needs.values()), needs
    # (4 minutes * 60 + 75) * 2 + 60 = 690; with ASYNC_MINUTES=2.5: (150 + 75) * 2 + 60 = 510
    assert needs["async-recipe"] == "690"
    fractional = run_runner(tmp_path, "list", env={"ASYNC_MINUTES": "2.5", "E2E_REAL_TIMEOUT": "640"})
    assert re.search(r"^async-recipe\s+510 ", fractional.stdout, re.M)
    assert re.search(r"^e2e-c-real-ll\s+700 ", fractional.stdout, re.M)  # its timeout + 60


def commands_in(line: str) -> list[list[str]]:
    """The simple commands of a shell line, each without its VAR=value prefixes: split at && || ; |, and
    a parenthesised part ( (...) or $(...) ) is a command of its own inside the one around it; quotes kept."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    done, stack = [], [[]]
    for token in lexer:
        if token in {"&&", "||", ";", "|"}:
            done.append(stack.pop())
            stack.append([])
        elif token in {"(", "$("}:
            stack.append([])
        elif token == ")":
            done.append(stack.pop())
        elif stack[-1] or not re.match(r"^[A-Z_][A-Z0-9_]*=", token):
            stack[-1].append(token)
    return [c for c in done + stack if c]


def test_every_command_starts_with_a_program_or_a_function_of_the_stages():
    defined = set(re.findall(r"^([a-z_0-9]+)\(\) \{", FUNCTIONS.read_text(), re.M))
    assert commands_in("A=1 f x && (cd /tmp && env P=$(g y) $PY -c 'a; b')") == [
        ["f", "x"], ["cd", "/tmp"], ["g", "y"], ["env", "P=$", "$PY", "-c", "a; b"]]
    for name, _, command, _ in rows(TABLE):
        for words in commands_in(command):
            assert words[0] in {"$PY", "env", "cd"} or words[0] in defined, (name, words)


def fake_table(tmp_path: Path) -> Path:
    table = tmp_path / "stages.tsv"
    table.write_text("# a stand-in table\n" + "\n".join("\t".join(r) for r in [
        ("quick", "1", "echo \"ran $STAGE\" > $W/quick.txt", "writes a file"),
        ("slow", "9999", "echo never > $W/slow.txt", "needs more than any budget here"),
        ("fails", "0", "echo failing; exit 3", "exits 3"),
        ("minutes", "${FAKE_MINUTES:-0.01} * 60", "echo minutes", "seconds from a fractional variable"),
        ("pat-*", "0", "echo \"matched $STAGE\"", "a pattern row"),
        ("uses-fn", "0", "minutes_s 0.5 3", "a function of functions.sh"),
        ("late", "0", "sleep 1; echo late > $W/late.txt", "run in the background"),
    ]) + "\n")
    return table


def test_the_runner_runs_skips_fails_matches_and_packs(tmp_path):
    done = run_runner(tmp_path, "quick", "slow", "fails", "pat-one", "uses-fn", "late-bg", "minutes", "nosuch",
                      table=fake_table(tmp_path), env={"BUDGET_S": "100"})
    assert done.returncode == 2, done.stdout + done.stderr  # the unknown stage, after the others ran
    results = tmp_path / "h200_results"
    log = (results / "run.log").read_text()
    assert "== quick rc=0" in log and (results / "quick.txt").read_text() == "ran quick\n"
    assert re.search(r"== slow skipped: \d+ s left, needs 9999", log) and not (results / "slow.txt").exists()
    assert "== fails rc=3" in log and "== minutes rc=0" in log  # the stage after a failure still ran
    assert (results / "pat-one.log").read_text() == "matched pat-one\n"
    assert (results / "uses-fn.log").read_text() == "33\n"  # 0.5 minutes + 3 s
    assert "== nosuch: no such stage" in log
    assert (results / "late.txt").read_text() == "late\n"  # the background stage was waited for
    with tarfile.open(tmp_path / "out" / "h200_results.tgz") as archive:
        names = set(archive.getnames())
    assert {"h200_results/run.log", "h200_results/quick.log", "h200_results/fails.log"} <= names
    commands = (results / "commands.txt").read_text()
    assert "quick: cd " in commands and "slow:" not in commands  # a skipped stage ran nothing


def test_a_stage_is_cut_at_what_is_left_of_the_budget(tmp_path):
    table = tmp_path / "stages.tsv"
    table.write_text("long\t0\tsleep 30; echo finished\tsleeps past the budget\n")
    done = run_runner(tmp_path, "long", table=table, env={"BUDGET_S": "12"})
    log = (tmp_path / "h200_results" / "run.log").read_text()
    rc = int(re.search(r"== long rc=(\d+)", log).group(1))
    assert rc in (124, 137) and "finished" not in (tmp_path / "h200_results" / "long.log").read_text(), done.stdout


@pytest.mark.parametrize("stage", ["e2e-b-real-ll", "big-lora-qwen2.5-32b"])
def test_the_real_tables_pattern_and_named_stages_resolve(tmp_path, stage):
    done = run_runner(tmp_path, stage, env={"BUDGET_S": "1"})  # skipped for the budget: nothing starts
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"== {stage} skipped" in (tmp_path / "h200_results" / "run.log").read_text()


def test_the_stages_the_docs_name_are_in_the_table():
    names = [row[0] for row in rows(TABLE)]
    words_allowed = {"list", "detach", "wait-detached", "wait-bg"}
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = set()
    for path in texts:
        for run in re.findall(r"h200_run\.sh((?: [a-z][a-z0-9.-]*)+)", path.read_text()):
            named.update(run.split())
    assert {"e2e-b-ll", "vl-recipe"} <= named  # the pattern finds the docs' commands
    for stage in named - words_allowed:
        base = stage[:-3] if stage.endswith("-bg") else stage
        assert any(fnmatch.fnmatchcase(base, name) for name in names), stage
