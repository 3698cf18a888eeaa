"""The built-in tools: `calculator` (safe arithmetic) and `python` (code in the sandbox).

Both return their failures as text starting with "error:" (the model reads it and may try
again) rather than raising: a wrong expression is the model's mistake, not the tool's.

calculator parses the expression with `ast` and evaluates the tree itself (no eval): numbers,
+ - * / // % **, unary + and -, parentheses; no names, calls, attributes, subscripts, strings or
comparisons. Sizes are checked *before* each operation, so nothing hostile can take long:
expressions are at most 500 characters, integers at most 4096 bits (about 1233 digits; a power
whose result would be larger is refused unevaluated, so "9**9**9" answers at once), floats must
stay finite. Results are plain strings: "42", "0.5", "2" for 4/2 (a float with an integral value
below 1e15 prints without ".0").
"""

from __future__ import annotations

import ast
import math
import operator
import signal

from verl.agents.sandbox import run_python

MAX_EXPRESSION_CHARS = 500
MAX_INT_BITS = 4096
PYTHON_TIMEOUT_S = 5.0
PYTHON_OUTPUT_CHARS = 2000


class _Refused(ValueError):
    pass


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_NOT_ALLOWED = {ast.Name: "names are", ast.Call: "function calls are", ast.Attribute: "attribute access is",
                ast.Subscript: "subscripts are", ast.Compare: "comparisons are", ast.BoolOp: "'and'/'or' are",
                ast.Lambda: "lambdas are", ast.Tuple: "tuples (commas) are", ast.List: "lists are",
                ast.Dict: "dicts are", ast.Set: "sets are", ast.JoinedStr: "strings are",
                ast.IfExp: "conditionals are", ast.NamedExpr: "':=' is", ast.Starred: "'*' unpacking is"}
_OPERATORS = {ast.BitXor: "'^' (for powers use **)", ast.BitAnd: "'&'", ast.BitOr: "'|'", ast.LShift: "'<<'",
              ast.RShift: "'>>'", ast.MatMult: "'@'", ast.Invert: "'~'", ast.Not: "'not'"}
_HELP = "use numbers, + - * / // % ** and parentheses"


def _checked(value):
    if isinstance(value, complex):
        raise _Refused("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _Refused(f"the result is too large (more than {MAX_INT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Refused("the result is too large for a floating-point number")
    return value


def _power(a, b):
    """a ** b, refusing an integer power too large to compute quickly (floats cannot take long: they
    overflow with OverflowError)."""
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        if b * math.log2(abs(a)) > MAX_INT_BITS:
            raise _Refused(f"the result is too large (more than {MAX_INT_BITS} bits)")
    return a ** b


def _evaluate(node):
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Refused(f"{value!r} is not a number; {_HELP}")
        return _checked(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _checked(_power(left, right))
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int) and \
                left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
            raise _Refused(f"the result is too large (more than {MAX_INT_BITS} bits)")
        return _checked(_BINARY[type(node.op)](left, right))
    op = getattr(node, "op", None)
    if op is not None and type(op) in _OPERATORS:
        raise _Refused(f"{_OPERATORS[type(op)]} is not supported; {_HELP}")
    what = next((text for kind, text in _NOT_ALLOWED.items() if isinstance(node, kind)), f"{type(node).__name__} is")
    raise _Refused(f"{what} not allowed; {_HELP}")


def _format(value) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return its value.

    Supports numbers, the operators + - * / // % ** and parentheses.

    Args:
        expression: The arithmetic expression to evaluate, for example "(127 + 385) * 3".
    """
    if not isinstance(expression, str):
        return "error: the expression must be a string, for example \"2 + 3\""
    text = expression.strip()
    if not text:
        return "error: empty expression"
    if len(text) > MAX_EXPRESSION_CHARS:
        return f"error: the expression is longer than {MAX_EXPRESSION_CHARS} characters"
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        detail = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
        return f"error: not an arithmetic expression ({detail}); {_HELP}"
    try:
        return _format(_evaluate(tree.body))
    except _Refused as exc:
        return f"error: {exc}"
    except ZeroDivisionError:
        return "error: division by zero"
    except (OverflowError, MemoryError, RecursionError):
        return "error: the result is too large"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def python(code: str) -> str:
    """Run a Python script and return what it prints.

    The script runs in a sandbox with the standard library only, no network and no files outside its
    working directory, for at most 5 seconds. Print the values you want to see.

    Args:
        code: The Python source code to run, for example "print(sum(range(10)))".
    """
    if not isinstance(code, str):
        return "error: the code must be a string"
    result = run_python(code, timeout_s=PYTHON_TIMEOUT_S, cpu_s=PYTHON_TIMEOUT_S,
                        max_output_chars=PYTHON_OUTPUT_CHARS)
    parts = [p.rstrip("\n") for p in (result.stdout, result.stderr) if p.strip()]
    if result.timed_out:
        parts.append(f"error: timed out after {PYTHON_TIMEOUT_S:g} s")
    elif result.returncode is not None and result.returncode < 0:
        name = _signal_name(-result.returncode)
        why = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (a limit was hit)"}.get(name, "")
        parts.append(f"error: the script was killed by {name}{why}")
    elif result.returncode not in (0, None) and not result.stderr.strip():
        parts.append(f"error: exit code {result.returncode}")
    return "\n".join(parts) if parts else "(no output: print() the values you want to see)"


BUILTIN_TOOLS = {"calculator": calculator, "python": python}
