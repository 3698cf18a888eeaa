"""Code-execution rewards (verl/rewards/real_verl_scores/code.py): real verl's code data sources scored by running
the response's program against the row's tests in verl's sandbox; by hand, and against real verl 0.9.1's own
default_compute_score (its prime_code rule, run in its own process by tests/real_verl_oracle.py) on a shared case
set. Each case runs a sandboxed process or more; a failing case runs up to 10 more."""

from __future__ import annotations

import json

import pytest
from real_verl_runner import require_real_verl, run_real_verl

from verl.rewards.real_verl_scores import compute_score
from verl.rewards.real_verl_scores.code import program_of, score

DOUBLE = "```python\nprint(int(input()) * 2)\n```"
STDIN_TESTS = {"inputs": ["3\n", "4\n", "5\n", "6\n"], "outputs": ["6\n", "8\n", "11\n", "12\n"]}

# (response, ground truth) pairs; real verl's scores are the reference
CASES = [
    (DOUBLE, {"inputs": ["3\n", "4\n"], "outputs": ["6\n", "8\n"]}),                       # all pass: 1
    (DOUBLE, STDIN_TESTS),                                                                # 3 of 4 pass: 0.75
    (DOUBLE, json.dumps(STDIN_TESTS)),                                                    # the tests as JSON
    ("Here:\n```python\nx = input()\nprint(x)\n```\nthat's it", {"inputs": ["a b\n"], "outputs": ["  a b  \n\n"]}),
    ("print('1\\n\\n2')", {"inputs": [""], "outputs": ["1\n2"]}),                          # empty lines dropped
    ("print(' 1 ')\nprint('2 ')", {"inputs": [""], "outputs": ["1\n2"]}),                  # lines stripped
    ("print(sqrt(2))", {"inputs": [""], "outputs": ["1.41421356"]}),                      # the prelude's math
    ("print(0.1 + 0.2)", {"inputs": [""], "outputs": ["0.3"]}),                            # allclose
    ("print(100001)", {"inputs": [""], "outputs": ["100000"]}),                            # digits: exact
    ("print(1.0001)", {"inputs": [""], "outputs": ["1"]}),                                 # beyond rtol 1e-5
    ("import sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data)))", {"inputs": ["1 2\n3\n"], "outputs": ["6"]}),
    ("n = int(input())\nif n > 2:\n    raise ValueError()\nprint(n)", {"inputs": ["1", "2", "3", "1"], "outputs": ["1", "2", "3", "1"]}),
    ("import sys\nprint('ok')\nsys.exit(0)\nprint('no')", {"inputs": [""], "outputs": ["ok"]}),  # SystemExit passes
    ("def main():\n    print(7)\n\nif __name__ == '__main__':\n    main()", {"inputs": [""], "outputs": ["7"]}),
    ("def add(a, b):\n    return a + b", {"fn_name": "add", "inputs": ["1\n2", "[1]\n[2]"], "outputs": ["3", "[1, 2]"]}),
    ("def add(a, b):\n    return a + b", {"fn_name": "add", "inputs": ["1\n2", "3\n4"], "outputs": ["3", "8"]}),  # 0
    ("class Solution:\n    def pair(self, x):\n        return (x, x)", {"fn_name": "pair", "inputs": ["5"], "outputs": ["[5, 5]"]}),
    ("def f(x):\n    return x", {"fn_name": "f", "inputs": ["3"], "outputs": ["[3]"]}),  # a one-element list matches
    ("print(", {"inputs": ["1"], "outputs": ["1"]}),                                          # does not compile: 0
    ("print(1)", "not json"),                                                                 # malformed tests: 0
    ("print(1)", {"inputs": [], "outputs": []}),                                              # no tests: 1
]


def test_the_program_is_the_last_python_block():
    assert program_of("a\n```python\nx = 1\n```\nb\n```python\ny = 2\n```\nc") == "\ny = 2\n"
    assert program_of("print(1)") == "print(1)"


def test_scores_by_hand():
    assert score(DOUBLE, {"inputs": ["3\n", "4\n"], "outputs": ["6\n", "8\n"]}) == 1.0
    # the first run stops at test 3 (5 * 2 != 11); one a process, tests 1, 2 and 4 pass: 3 / 4
    assert score(DOUBLE, STDIN_TESTS) == 0.75
    assert score("def add(a, b):\n    return a + b", {"fn_name": "add", "inputs": ["1\n2"], "outputs": ["3"]}) == 1.0
    assert score("print(", {"inputs": ["1"], "outputs": ["1"]}) == 0.0
    assert compute_score("apps", DOUBLE, {"inputs": ["1"], "outputs": ["2"]}) == 1.0  # routed by data_source


def test_a_program_that_never_ends_is_stopped_and_scores_0():
    assert score("while True:\n    pass", {"inputs": ["1"], "outputs": ["1"]}) == 0.0


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    require_real_verl("verl", "utils", "reward_score", "prime_code", "__init__.py")
    cases = [dict(kind="score", data_source="codecontests", response=r, ground_truth=g) for r, g in CASES]
    return run_real_verl(cases, tmp_path_factory.mktemp("code"), timeout=600)


def test_every_case_scores_as_real_verl(real):
    ours = [score(r, g) for r, g in CASES]
    theirs = [r.get("score", r.get("error")) for r in real]
    differ = [(CASES[i][0][-60:], CASES[i][1], ours[i], theirs[i]) for i in range(len(CASES)) if ours[i] != theirs[i]]
    assert not differ, differ
    assert {0.0, 0.75, 1.0} <= set(theirs)  # the case set reaches every kind of result
