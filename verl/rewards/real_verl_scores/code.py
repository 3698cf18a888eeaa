"""Code-execution rewards for real verl's code data sources (codecontests, apps, codeforces, taco): the program in
the response runs against the row's test cases in verl's sandbox (verl/agents/sandbox.py), scored as real verl's
default scorer for these sources (its prime_code rule, with no sandbox_fusion_url) scores them:

    score("```python\\nprint(int(input()) * 2)\\n```", {"inputs": ["3\\n"], "outputs": ["6\\n"]})   -> 1.0

The rule, written here from what it computes:
- the program is the text after the last "```python" up to the next "```" (the whole response without one);
- test cases: {"inputs": [...], "outputs": [...]} (a dict or its JSON), with "fn_name" for call-based problems
  (each input is JSON lines, one argument a line; the output is JSON), else standard input and output;
- all the tests run in one process, 5 s each and 6 s in all, stopping at the first that fails: all passed is 1.0
  (no test at all, too);
- else the first 10 tests run one a process, 10 s each: the score is the share of them that passed (these runs
  carry no fn_name, as real verl's do, so a call-based program that failed the first run scores 0);
- anything malformed (test cases that are not JSON, a program that does not compile) scores 0.

A standard-input program reads the test's input from `sys.stdin` / `input()` / `open(...)`; it passes when its
output, stripped, equals the expected output stripped (also line by line), or its non-empty lines equal the
expected non-empty stripped lines, or the same number of lines each parse as numbers that agree to
numpy.allclose's tolerance (rtol 1e-5, atol 1e-8; lines of digits only must match exactly). A call-based
program passes when fn_name (a method of `Solution()` when the program defines that class) returns the expected
value (tuples as lists; an expected one-element list also matches its element). The names real verl puts in
scope before the program (the star-imports of string, re, math, collections, heapq, itertools, functools, ...)
are in scope here too. Known difference: real verl runs a standard-input program as the body of a function
whose every line it indents with a tab, which changes the text of multi-line string literals; here the program
runs as it is written.
"""

from __future__ import annotations

import json
from typing import Any

from verl.agents.sandbox import run_python

ALL_TESTS_TIMEOUT_S = 5  # per test when all run in one process; the process has 1 s more
ONE_TEST_TIMEOUT_S = 10  # per test of the one-a-process runs
FIRST_TESTS = 10  # the one-a-process runs score the first ones only
START_ALLOWANCE_S = 2.0  # the sandbox's own start-up, on top of the tests' limits
RESULT_TAG = "VERL_CODE_RESULTS "

# The program runs under this harness in the sandbox: it reads its payload, runs the tests and prints one line,
# RESULT_TAG + JSON [True / False / -1 (error, timeout) / -2 (no program)] per test run (stopping at the first
# failure when asked).
HARNESS = r'''
import builtins, io, json, signal, sys
PAYLOAD = json.loads(%(payload)r)
PRELUDE = ("from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
           "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\n"
           "from random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\n"
           "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
           "from builtins import *\nfrom typing import *\nimport string, re, datetime, collections, heapq, "
           "bisect, copy, math, random, statistics, itertools, functools, operator, io, sys, json\n")
sys.setrecursionlimit(6 * 10 ** 5)

class Timeout(BaseException):
    pass

def alarm(signum, frame):
    raise Timeout()

signal.signal(signal.SIGALRM, alarm)

def compile_program():
    try:
        return compile(PRELUDE + PAYLOAD["program"], "<program>", "exec")
    except BaseException:
        return None

def lines_equal_numbers(out, exp):
    if len(out) != len(exp):
        return False
    if all(a.isdigit() and b.isdigit() for a, b in zip(out, exp)):
        return False
    try:
        a, b = [float(x) for x in out], [float(x) for x in exp]
    except ValueError:
        return False
    return all(x == y or abs(x - y) <= 1e-8 + 1e-5 * abs(y) for x, y in zip(a, b))

def stdin_passes(printed, expected):
    out = printed.splitlines()
    if "\n".join(out).strip() == expected.strip() or "\n".join(o.strip() for o in out).strip() == expected.strip():
        return True
    exp = [e.strip() for e in expected.split("\n") if e]
    nonempty = [o for o in out if o]
    if out == exp or nonempty == exp:
        return True
    return lines_equal_numbers(nonempty, exp)

def call_passes(got, expected):
    if isinstance(got, tuple):
        got = list(got)
    if got == expected or (isinstance(expected, list) and expected and got == expected[0]):
        return True
    try:
        return isinstance(got[0], tuple) and [list(x) for x in got] == expected[0]
    except Exception:
        return False

def int_keys(value):
    return {int(k): v for k, v in value.items()}

def run_one(code, index, namespace, timeout):
    captured = io.StringIO()
    real_stdout = sys.stdout
    sys.stdout = captured  # what the program prints stays off the harness's own output
    try:
        return run_captured(code, index, namespace, timeout, captured)
    finally:
        sys.stdout = real_stdout

def run_captured(code, index, namespace, timeout, captured):
    tests = PAYLOAD["tests"]
    given, want = tests["inputs"][index], tests["outputs"][index]
    fn_name = tests.get("fn_name")
    signal.alarm(timeout)
    try:
        if fn_name is not None:
            args = [json.loads(line) for line in given.split("\n")]
            want = json.loads(want)
            if args and isinstance(args[0], dict):
                try:
                    args = [int_keys(args[0])]
                except Exception:
                    pass
            if isinstance(want, dict):
                try:
                    want = [int_keys(want)]
                except Exception:
                    pass
            if namespace is None or "__fn__" not in namespace:
                namespace = {"__name__": "__program__"} if namespace is None else namespace
                exec(code, namespace)
                owner = namespace["Solution"]() if "class Solution" in PAYLOAD["program"] else None
                namespace["__fn__"] = getattr(owner, fn_name) if owner is not None else namespace[fn_name]
            return call_passes(namespace["__fn__"](*args), want)
        text = "\n".join(given) if isinstance(given, list) else given
        expected = "\n".join(want) if isinstance(want, list) else want
        real_stdin, real_open = sys.stdin, builtins.open
        sys.stdin = io.StringIO(text)
        builtins.open = lambda *a, **k: io.StringIO(text)
        try:
            exec(code, {"__name__": "__main__"})
        except SystemExit:
            pass
        finally:
            sys.stdin, builtins.open = real_stdin, real_open
        return stdin_passes(captured.getvalue(), expected)
    except BaseException:
        return -1
    finally:
        signal.alarm(0)

code = compile_program()
results = []
if code is None:
    results.append(-2)
elif PAYLOAD["only"] is None:
    shared = {"__name__": "__program__"}
    for i in range(len(PAYLOAD["tests"]["inputs"])):
        results.append(run_one(code, i, shared, PAYLOAD["timeout"]))
        if results[-1] is not True:
            break
else:
    results.append(run_one(code, PAYLOAD["only"], None, PAYLOAD["timeout"]))
sys.stdout.write("\n%(tag)s" + json.dumps(results) + "\n")
'''


def program_of(response: str) -> str:
    """The text after the response's last ```python fence, up to the next fence (the whole text without one)."""
    return response.split("```python")[-1].split("```")[0]


def _run(program: str, tests: dict, only, timeout: int) -> list:
    """The harness's per-test results, or [-1] x n when the process died, hung or printed no result line."""
    payload = json.dumps({"program": program, "tests": tests, "only": only, "timeout": timeout})
    code = HARNESS % {"payload": payload, "tag": RESULT_TAG}
    limit = timeout + 1 + START_ALLOWANCE_S  # the run's own limit: its tests' and 1 s more, as real verl's
    done = run_python(code, timeout_s=limit, cpu_s=limit, memory_mb=1024, max_output_chars=20_000)
    marker = done.stdout.rfind(RESULT_TAG)
    if done.timed_out or marker < 0:
        return [-1] * (1 if only is not None else max(1, len(tests["inputs"])))
    return json.loads(done.stdout[marker + len(RESULT_TAG):].splitlines()[0])


def score(response: str, ground_truth: Any) -> float:
    """1.0 when every test passes, else the share of the first 10 tests that pass one a process (module
    docstring); 0.0 for test cases or a program that cannot be run."""
    program = program_of(response)
    tests = ground_truth
    if not isinstance(tests, dict):
        try:
            tests = json.loads(tests)
        except (TypeError, ValueError):
            return 0.0
    if not isinstance(tests, dict) or "inputs" not in tests or "outputs" not in tests:
        return 0.0
    results = _run(program, tests, None, ALL_TESTS_TIMEOUT_S)
    if all(r is True for r in results):
        return 1.0
    # One a process, as real verl runs them: without fn_name (its per-test cases carry only inputs and outputs), so
    # a call-based program runs as a standard-input one there, prints nothing and fails
    alone = {"inputs": tests["inputs"], "outputs": tests["outputs"]}
    firsts = [_run(program, alone, i, ONE_TEST_TIMEOUT_S) for i in range(min(FIRST_TESTS, len(tests["inputs"])))]
    flat = [r for part in firsts for r in part]
    return sum(r is True for r in flat) / (len(flat) or 1)
