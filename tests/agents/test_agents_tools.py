"""Tools (verl.agents.tools, builtin_tools): schemas from hints and docstrings, loading from the
config, the ToolRunner's concurrency and failure containment, the calculator against hand-computed
values and hostile input. The environments: tests/agents/test_agents_environment.py."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Literal, Optional, Union

import pytest

from verl.agents.builtin_tools import BUILTIN_TOOLS, calculator, python
from verl.agents.parsing import ToolCall, parse_tool_calls
from verl.agents.tools import ToolRunner, check_arguments, load_tools, to_text, tool_from_callable
from verl.errors import ConfigError


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: The first summand.
        b: The second summand.
    """
    return a + b


def no_docstring(x: int) -> int:
    return x


def no_hints(x):
    """Return x.

    Args:
        x: Anything.
    """
    return x


def call(name, **arguments):
    return ToolCall(name=name, arguments=arguments, raw="")


# --------------------------------------------------------------------------- schemas and loading


def test_schema_from_type_hints_and_docstring():
    tool = tool_from_callable(add)
    assert tool.name == "add" and tool.fn is add
    assert tool.schema["type"] == "function"
    fn = tool.schema["function"]
    assert fn["name"] == "add" and fn["description"] == "Add two integers."
    assert fn["parameters"]["properties"] == {"a": {"type": "integer", "description": "The first summand."},
                                              "b": {"type": "integer", "description": "The second summand."}}
    assert fn["parameters"]["required"] == ["a"]
    renamed = tool_from_callable(add, name="plus")
    assert renamed.name == "plus" and renamed.schema["function"]["name"] == "plus"
    assert tool.schema["function"]["name"] == "add"  # the original is untouched


def test_schema_of_an_async_tool():
    async def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: Where from.
        """
        return url

    assert tool_from_callable(fetch).schema["function"]["parameters"]["properties"]["url"]["type"] == "string"


def test_missing_docstring_or_hints_is_a_clear_config_error():
    with pytest.raises(ConfigError, match=r"tool 'no_docstring': cannot derive its JSON schema.*no docstring"):
        tool_from_callable(no_docstring)
    with pytest.raises(ConfigError, match=r"tool 'no_hints'.*type hint"):
        tool_from_callable(no_hints)
    with pytest.raises(ConfigError, match=r"rollout.tools\[1\]: tool 'no_docstring'"):
        load_tools(["calculator", no_docstring])


def test_builtin_tools_have_schemas():
    tools = load_tools(["calculator", "python"])
    assert [t.name for t in tools] == ["calculator", "python"]
    assert tools[0].schema["function"]["parameters"]["required"] == ["expression"]
    assert tools[1].schema["function"]["parameters"]["properties"]["code"]["type"] == "string"
    assert set(BUILTIN_TOOLS) == {"calculator", "python"}


def test_load_tools_from_a_file_and_a_module(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text('def shout(text: str) -> str:\n    """Shout.\n\n    Args:\n        text: What to shout.\n    """\n'
                    '    return text.upper()\n\n\ndef helper():\n    pass\n')
    tools = load_tools([f"{path}:shout", "tests.agents.test_agents_tools:add"])
    assert [t.name for t in tools] == ["shout", "add"]
    assert tools[0].fn("hi") == "HI"
    with pytest.raises(ConfigError, match=r"rollout.tools\[0\]: .* has no function 'nope' \(defined there: helper, sh"):
        load_tools([f"{path}:nope"])


@pytest.mark.parametrize("specs, message", [
    (["calculator", "calculator"], r"rollout.tools\[1\]: a second tool named 'calculator' \(the first is .*\[0\]\)"),
    (["calculator", "verl.agents.builtin_tools:calculator"], r"rollout.tools\[1\]: a second tool named 'calculator'"),
    (["calculator", "abacus"], r"rollout.tools\[1\]: unknown tool 'abacus'; a built-in \(calculator, python\)"),
    (["no_such_module_xyz:f"], r"rollout.tools\[0\]: cannot import module 'no_such_module_xyz'"),
    (["missing_file.py:f"], r"rollout.tools\[0\]: file 'missing_file.py' not found"),
    ([42], r"rollout.tools\[0\]: expected a tool name"),
    (["verl.agents.environment:Environment"], r"rollout.tools\[0\]: .* is a class"),
])
def test_load_tools_errors_name_the_key(specs, message):
    with pytest.raises(ConfigError, match=message):
        load_tools(specs)


def test_load_tools_custom_key():
    with pytest.raises(ConfigError, match=r"^tools\[0\]: unknown tool"):
        load_tools(["nope"], key="tools")


# --------------------------------------------------------------------------- ToolRunner: containment


def boom(x: int) -> int:
    """Fail.

    Args:
        x: Ignored.
    """
    raise ValueError(f"bad value {x}")


def test_unknown_tool_lists_the_known_ones():
    runner = ToolRunner(load_tools(["calculator", add]))
    [res] = runner.run([call("abacus", expression="1")])
    assert not res.ok and res.kind == "unknown_tool"
    assert res.text == res.error == "error: unknown tool 'abacus'; the available tools are: calculator, add"


def test_bad_arguments_are_messages():
    runner = ToolRunner(load_tools(["calculator", add]))
    results = runner.run([
        call("calculator"),                               # missing
        call("calculator", expression=5),                 # wrong JSON type
        call("calculator", expression="1", extra=1),      # unexpected
        call("add", a="2"),                               # string for an integer
        call("add", a=True),                              # a boolean is not an integer
        call("add", a=2.5),                               # neither is a float
        call("add", a=2, b=3),                            # fine
    ])
    assert [r.kind for r in results] == ["bad_arguments"] * 6 + [None]
    assert "missing a required argument: 'expression'" in results[0].text
    assert "the parameters are: expression (string)" in results[0].text
    assert "'expression' must be string, got integer 5" in results[1].text
    assert "unexpected keyword argument 'extra'" in results[2].text
    assert "'a' must be integer, got string" in results[3].text
    assert results[6].ok and results[6].text == "5"


def test_malformed_call_from_parsing_then_runner():
    parsed = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {"expression": 7}}</tool_call>'
                              '<tool_call>{"name": "calculator", "arguments": {"expression": "7*6"}}</tool_call>')
    results = ToolRunner(load_tools(["calculator"])).run(parsed.calls)
    assert [r.ok for r in results] == [False, True] and results[1].text == "42"


def test_raising_tool_is_contained():
    def leave(code: int) -> str:
        """Exit.

        Args:
            code: Exit code.
        """
        raise SystemExit(code)

    runner = ToolRunner([tool_from_callable(boom), tool_from_callable(leave), tool_from_callable(add)])
    results = runner.run([call("boom", x=3), call("leave", code=1), call("add", a=1)])
    assert results[0].text == "error: ValueError: bad value 3" and results[0].kind == "raised" and not results[0].ok
    assert results[1].text == "error: SystemExit: 1"
    assert results[2].ok and results[2].text == "1"


def test_non_string_and_huge_returns():
    class Odd:
        def __str__(self):
            return "odd"

    def value(kind: str):
        """Return something.

        Args:
            kind: Which.
        """
        return {"dict": {"a": [1, 2.5, None]}, "none": None, "int": 3, "bytes": "é".encode(), "odd": Odd(),
                "set": {1}, "huge": "x" * 1_000_000}[kind]

    runner = ToolRunner([tool_from_callable(value)], max_output_chars=100)
    out = {k: r for k, r in zip(["dict", "none", "int", "bytes", "odd", "set", "huge"],
                                 runner.run([call("value", kind=k) for k in ["dict", "none", "int", "bytes", "odd",
                                                                             "set", "huge"]]))}
    assert out["dict"].text == '{"a": [1, 2.5, null]}'
    assert (out["none"].text, out["int"].text, out["bytes"].text, out["odd"].text, out["set"].text) == \
        ("null", "3", "é", "odd", "{1}")
    assert all(r.ok for r in out.values())
    huge = out["huge"]
    assert huge.truncated and huge.text.startswith("x" * 100)
    assert huge.text.endswith("[... output truncated: 999900 more characters]") and len(huge.text) < 200
    assert not out["dict"].truncated
    assert to_text(b"\xff") == "\ufffd"


# --------------------------------------------------------------------------- ToolRunner: concurrency and time


def test_calls_run_concurrently_and_in_order():
    def nap(i: int) -> int:
        """Sleep half a second.

        Args:
            i: Returned.
        """
        time.sleep(0.5)
        return i

    runner = ToolRunner([tool_from_callable(nap)], max_workers=8)
    start = time.monotonic()
    results = runner.run([call("nap", i=i) for i in range(8)])
    elapsed = time.monotonic() - start
    assert [r.text for r in results] == [str(i) for i in range(8)]
    # One after another this takes 8 x 0.5 = 4 s; concurrently about 0.5 s. Sleeping threads need no
    # CPU, so even on a loaded 2-core machine 2.5 s leaves ample room for thread start-up and
    # scheduling delays while still failing any serial (or 2-at-a-time) execution.
    assert elapsed < 2.5, elapsed
    assert all(0.4 < r.seconds < 2.5 for r in results)


def test_max_workers_bounds_the_concurrency():
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def busy(i: int) -> int:
        """Count concurrent calls.

        Args:
            i: Returned.
        """
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.1)
        with lock:
            state["now"] -= 1
        return i

    results = ToolRunner([tool_from_callable(busy)], max_workers=2).run([call("busy", i=i) for i in range(6)])
    assert [r.text for r in results] == [str(i) for i in range(6)]
    assert state["peak"] == 2


def test_a_hanging_tool_times_out_while_the_others_return():
    release = threading.Event()

    def hang(x: int) -> int:
        """Never return (until the test ends).

        Args:
            x: Ignored.
        """
        release.wait(60)
        return x

    runner = ToolRunner([tool_from_callable(hang), tool_from_callable(add)], timeout_s=0.5, max_workers=2)
    try:
        start = time.monotonic()
        results = runner.run([call("hang", x=1), call("add", a=1), call("add", a=2), call("add", a=3)])
        elapsed = time.monotonic() - start
        assert results[0].kind == "timeout" and results[0].text == "error: timed out after 0.5 s"
        assert not results[0].ok and results[0].seconds >= 0.5
        assert [r.text for r in results[1:]] == ["1", "2", "3"]
        assert elapsed < 3.0, elapsed  # 0.5 s timeout plus scheduling slack; never the 60 s of the hang
        assert runner.abandoned == 1
        # The runner goes on: the abandoned thread does not take a worker slot.
        assert [r.text for r in runner.run([call("add", a=5), call("add", a=6)])] == ["5", "6"]
    finally:
        release.set()
        runner.close()
    with pytest.raises(RuntimeError):
        runner.run([])


def test_an_abandoned_call_does_not_hold_up_the_interpreter_exit():
    import subprocess
    import sys

    code = ("import time\nfrom verl.agents.tools import Tool, ToolRunner\nfrom verl.agents.parsing import ToolCall\n"
            "tool = Tool('hang', lambda: time.sleep(120), {'type': 'function', 'function': {'name': 'hang'}})\n"
            "print(ToolRunner([tool], timeout_s=0.2).run([ToolCall('hang', {}, '')])[0].text)\n")
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "error: timed out after 0.2 s", out.stderr
    assert time.monotonic() - start < 30  # exits right away, not after the 120 s sleep


def test_async_tools_run_concurrently_and_are_cancelled_at_the_timeout():
    cancelled = threading.Event()

    async def wait(seconds: float) -> str:
        """Wait.

        Args:
            seconds: How long.
        """
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return f"waited {seconds}"

    async def fail(x: int) -> int:
        """Fail.

        Args:
            x: Ignored.
        """
        await asyncio.sleep(0)
        raise KeyError("missing")

    runner = ToolRunner([tool_from_callable(wait), tool_from_callable(fail)], timeout_s=1.0)
    start = time.monotonic()
    results = runner.run([call("wait", seconds=0.4) for _ in range(6)] + [call("wait", seconds=30), call("fail", x=1)])
    elapsed = time.monotonic() - start
    assert [r.text for r in results[:6]] == ["waited 0.4"] * 6
    assert results[6].kind == "timeout" and cancelled.wait(5)  # really cancelled, not just abandoned
    assert results[7].text == "error: KeyError: 'missing'"
    assert elapsed < 3.0, elapsed  # 6 x 0.4 s serially would be 2.4 s before the 1 s timeout even starts


def test_runner_checks_its_settings_and_exposes_schemas():
    tools = load_tools(["calculator"])
    assert ToolRunner(tools).schemas == [tools[0].schema]
    with pytest.raises(ValueError):
        ToolRunner(tools, timeout_s=0)
    with pytest.raises(ValueError, match="two tools named"):
        ToolRunner(tools + tools)
    assert ToolRunner(tools).run([]) == []


def test_check_arguments_understands_optional_union_lists_and_enums():
    def f(xs: list[int], mode: Literal["a", "b"], n: Optional[int] = None, v: Union[int, str] = 0) -> str:
        """F.

        Args:
            xs: Numbers.
            mode: The mode.
            n: Maybe a number.
            v: Either.
        """
        return ""

    tool = tool_from_callable(f)
    assert check_arguments(tool, {"xs": [1, 2], "mode": "a", "n": None, "v": "s"}) is None
    assert "'xs' must be array" in check_arguments(tool, {"xs": [1, "2"], "mode": "a"})
    assert "one of" in check_arguments(tool, {"xs": [], "mode": "c"})
    assert "'v' must be integer or string" in check_arguments(tool, {"xs": [], "mode": "a", "v": 1.5})


# --------------------------------------------------------------------------- calculator


@pytest.mark.parametrize("expression, expected", [
    ("127 + 385", "512"), ("6*7", "42"), ("1/2", "0.5"), ("4/2", "2"), ("7 // 2", "3"), ("-7 // 2", "-4"),
    ("-7 % 3", "2"), ("2**10", "1024"), ("2 ** -1", "0.5"), ("-(3 + 4) * 2", "-14"), ("+5", "5"),
    ("((1 + 2) * (3 + 4))", "21"), ("1/3", "0.3333333333333333"), ("0.1 + 0.2", "0.30000000000000004"),
    ("2 ** 0.5", "1.4142135623730951"), ("1e3", "1000"), ("999 * 999", "998001"), ("10 ** 20", str(10 ** 20)),
    ("1.5e20 * 1e10", "1.5e+30"), ("  3 - 5 ", "-2"), ("2**4095", str(2 ** 4095)),
])
def test_calculator_values(expression, expected):
    assert calculator(expression) == expected


@pytest.mark.parametrize("expression, fragment", [
    ("__import__('os')", "function calls are not allowed"),
    ("__import__('os').system('echo hi')", "not allowed"),
    ("().__class__", "attribute access is not allowed"),
    ("().__class__.__bases__[0].__subclasses__()", "not allowed"),
    ("x + 1", "names are not allowed"),
    ("'a' * 3", "is not a number"),
    ("True + 1", "is not a number"),
    ("[1, 2]", "lists are not allowed"),
    ("1, 2", "tuples"),
    ("2 ^ 3", "for powers use **"),
    ("1 < 2", "comparisons"),
    ("lambda: 1", "lambdas"),
    ("(x := 1)", "':=' is not allowed"),
    ("1 +", "not an arithmetic expression"),
    ("import os", "not an arithmetic expression"),
    ("", "empty expression"),
    ("1/0", "division by zero"), ("5 % 0", "division by zero"), ("0 ** -1", "division by zero"),
    ("9**9**9", "too large"), ("10**10000", "too large"), ("2**4096", "too large"),
    ("(2**3000) * (2**3000)", "too large"), ("2**4000 / 3", "too large"),
    ("1e308 * 10", "too large"), ("1.5 ** 10000", "too large"), ("(-8) ** 0.5", "not a real number"),
    ("9" * 600, "longer than 500 characters"),
    ("(" * 240 + "1" + ")" * 240, "too many nested parentheses"),  # the parser's limit is 200
])
def test_calculator_refuses_hostile_and_bad_input_quickly(expression, fragment):
    start = time.monotonic()
    out = calculator(expression)
    assert out.startswith("error: ") and fragment in out, out
    assert time.monotonic() - start < 0.5


def test_calculator_deep_but_legal_nesting_and_non_string():
    assert calculator("(" * 90 + "1" + ")" * 90) == "1"
    assert calculator(5).startswith("error: the expression must be a string")


def test_builtin_tools_through_the_runner():
    runner = ToolRunner(load_tools(["calculator", "python"]))
    results = runner.run([call("calculator", expression="(127 + 385) * 3"),
                          call("python", code="print(sum(range(10)))")])
    assert [r.text for r in results] == ["1536", "45"]


def test_python_tool_reports_errors_and_silence():
    assert python("print(1/0)").rstrip().endswith("ZeroDivisionError: division by zero")
    assert python("x = 1") == "(no output: print() the values you want to see)"
    assert "exit code 3" in python("import sys; sys.exit(3)")
    assert "killed by SIGABRT" in python("import os; os.abort()")
