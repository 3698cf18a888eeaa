"""`geo3k` reward: real verl's Geometry3K scorer (its default for data_source `hiyouga/geometry3k`;
verl/utils/reward_score/geo3k.py there, which grades with the `mathruler` package).

    score = 0.9 * correct + 0.1 * formatted

* formatted: the whole response is `<think>...</think>` followed by text holding a `\\boxed{...}`
  (the instruction examples/data_preprocess/geo3k.py appends to every problem);
* correct: the content of the last `\\boxed{...}` (braces balanced, stripped) equals the ground
  truth under the PRM800K-style grading that mathruler implements (`answers_equal`):
  1. equal after the MATH normalization (`mathd_normalize`: \\left/\\right, dfrac, degrees,
     percent, `x = 3` -> `3`, `\\sqrt3`, `\\frac12`, `0.5`, `a/b` -> `\\frac{a}{b}`, spaces), or
  2. equal after `canonical` (units, `$`, braces, case, LaTeX to plain text by pylatexenc, the
     library mathruler uses: `\\frac{a}{b}` -> a/b, `\\sqrt{x}` -> sqrt(x), `\\pi` -> pi), or
  3. element by element for tuples/intervals: fractions must match as written (unreduced ones are
     not accepted), an integer ground truth needs an integer answer (no simplification), and
     anything else is equal when sympy simplifies the difference to 0.

The 0.1 format weight is real verl's (its default_compute_score calls the scorer with it);
`reward_fn.format_score` does not apply to this type.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

from pylatexenc.latex2text import LatexNodes2Text

from verl.rewards.base import RewardFn, per_sample
from verl.rewards.real_verl_scores.hendrycks_math import PRM800K_PERCENT_MARKS, normalize

FORMAT_WEIGHT = 0.1
_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def is_formatted(response: str) -> bool:
    return _FORMAT.fullmatch(response) is not None


def last_boxed(text: str) -> Optional[str]:
    """The stripped content of the last `\\boxed{` up to its matching brace; None without one
    (or when it never closes)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    begin = start + len("\\boxed{")
    depth = 0
    for j in range(begin, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[begin:j].strip()
            depth -= 1
    return None


# ---------------------------------------------------------------------------
# 1. The MATH normalization (Hendrycks et al.'s math_equivalence, as PRM800K keeps it)
# ---------------------------------------------------------------------------


def mathd_normalize(answer: Optional[str]) -> Optional[str]:
    """mathruler's MATH normalization: stripped, an enclosing \\text{...} unwrapped, then the Hendrycks
    rule (verl.rewards.real_verl_scores.hendrycks_math.normalize) with PRM800K's percent marks; a
    string the rule cannot read is kept as it is after unwrapping."""
    if answer is None:
        return None
    s = answer.strip()
    m = re.fullmatch(r"\\text\{(.+?)\}", s)
    if m:
        s = m.group(1).strip()
    try:
        return normalize(s, PRM800K_PERCENT_MARKS)
    except Exception:  # (IndexError, ValueError): the rule gives up on this string
        return s


# ---------------------------------------------------------------------------
# 2. The canonical form for the sympy comparison
# ---------------------------------------------------------------------------

_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
          "foot", "feet", "inch", "yard")
_SYMPY_NAMES = (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*"))


def latex_to_text(s: str) -> str:
    """LaTeX to the plain text sympy reads, as mathruler renders it: \\tfrac and \\dfrac read as \\frac,
    a space put before each \\frac (so a mixed number '2\\frac12' stays two terms), the LaTeX rendered
    as text by pylatexenc's latex2text (the library mathruler uses: `\\frac{a}{b}` -> 'a/b',
    `\\sin x` -> 'sin x', `\\{` -> '{', Greek letters as letters), then √ π ∞ ∪ · × spelled as sympy
    names."""
    s = s.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    text = LatexNodes2Text().latex_to_text(s)
    for symbol, name in _SYMPY_NAMES:
        text = text.replace(symbol, name)
    return text.strip()


def _strip_thousands(s: str) -> str:
    """'1,234,567' -> '1234567'; tuple commas ('1,23') stay."""
    while True:
        t = re.sub(r"(\d),(\d\d\d)($|\D)", r"\1\2\3", s)
        if t == s:
            return s
        s = t


def _int_text(s: str) -> Optional[int]:
    try:
        x = float(_strip_thousands(s))
    except (ValueError, OverflowError):
        return None
    if x != x or abs(x) == float("inf") or abs(x - round(x)) > 1e-7:
        return None
    return int(x)


def canonical(expr: str) -> str:
    m = re.fullmatch(r"\\text\{(.+?)\}", expr)
    if m:
        expr = m.group(1)
    for old, new in (("\\%", ""), ("\\$", ""), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "),
                     ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):
        expr = expr.replace(old, new)
    for unit in _UNITS:
        expr = re.sub(rf"{unit}(es)?(s)? *(\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    try:
        value = float(expr)
        if abs(value - round(value)) <= 1e-7:
            expr = str(int(round(value)))
    except (ValueError, OverflowError):
        pass
    if "\\" in expr:
        with contextlib.suppress(Exception):  # LaTeX pylatexenc cannot read stays as written
            expr = latex_to_text(expr)
    expr = re.sub(r"- *", "-", expr)
    expr = re.sub(r"([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number '7 3/4' -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    as_int = _int_text(expr)
    return str(as_int) if as_int is not None else expr


# ---------------------------------------------------------------------------
# 3. Element-wise comparison
# ---------------------------------------------------------------------------

_FRACTION = re.compile(r"-?[0-9]+.?/0*[1-9][0-9]*.?")


def _elements(expr: str) -> list[str]:
    expr = _strip_thousands(expr)
    if not expr:
        return []
    inner = expr[1:-1]
    if len(expr) > 2 and expr[0] in "()[]" and expr[-1] in "()[]" and not any(c in inner for c in "()[]"):
        return [e.strip() for e in inner.split(",")]
    return [expr]


def _safe_for_sympy(expr: str) -> bool:
    """Simplification can hang on large powers or text: more than two unknown letters, '^{', '^(',
    stacked or multi-digit exponents are not tried."""
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr:
        return False
    return not re.search(r"\^[0-9]+\^|\^[0-9][0-9]+", expr)


def sympy_equal(truth: str, given: str) -> bool:
    expr = f"({truth})-({given})"
    if not _safe_for_sympy(expr):
        return False
    try:
        import sympy
        from sympy.parsing import sympy_parser

        rules = sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,)
        return sympy.simplify(sympy_parser.parse_expr(expr.replace("^", "**"), transformations=rules)) == 0
    except Exception:  # anything sympy cannot read is simply not equal (answers are free text)
        return False


def answers_equal(given: Optional[str], truth: str) -> bool:
    if given is None:
        return False
    if mathd_normalize(given) == mathd_normalize(truth):
        return True
    t, g = canonical(truth), canonical(given)
    if t == g:
        return True
    if not g:
        return False
    t_parts, g_parts = _elements(t), _elements(g)
    if len(t_parts) > 1 and (t[0] != g[0] or t[-1] != g[-1]):
        return False  # (a, b) vs [a, b]: other brackets
    if len(t_parts) != len(g_parts):
        return False
    for a, b in zip(t_parts, g_parts):
        if _FRACTION.fullmatch(a) and _FRACTION.fullmatch(b):
            ok = a == b  # an unreduced fraction is not accepted for a reduced one
        elif (_int_text(a) is None) != (_int_text(b) is None):
            ok = False  # an integer truth needs an integer answer
        else:
            ok = sympy_equal(a, b)
        if not ok:
            return False
    return True


def geo3k_score(response: str, ground_truth: str) -> float:
    correct = answers_equal(last_boxed(response), str(ground_truth))
    return (1.0 - FORMAT_WEIGHT) * float(correct) + FORMAT_WEIGHT * float(is_formatted(response))


def build_geo3k(cfg: RewardFnConfig) -> RewardFn:
    def geo3k(prompt, response, sample):
        truth = sample["ground_truth"]
        if truth is None:
            raise ValueError("this reward needs sample['ground_truth'] (set data.answer_key)")
        return geo3k_score(response, truth)

    return per_sample(geo3k, "geo3k")
