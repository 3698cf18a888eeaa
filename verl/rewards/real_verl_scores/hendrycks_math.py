"""Real verl's MATH rule (verl/utils/reward_score/math_reward.py there: the Hendrycks MATH
equivalence of lm-evaluation-harness), as its default_compute_score calls it for lighteval/MATH,
DigitalLearningGmbH/MATH-lighteval and HuggingFaceH4/MATH-500, matched exactly. 1.0 or 0.0.

Finding the answer:
* if the response contains `\\boxed ` (with a space) anywhere, the answer is the text after the
  last `\\boxed ` up to the next '$' (a later `\\boxed{...}` does not count: `\\boxed 7` beats it);
* otherwise the last `\\boxed` (else the last `\\fbox`) up to the brace that balances the braces
  counted from it; its content only when it reads `\\boxed{...}` -- an `\\fbox{...}` (or a
  `\\boxedx{...}`) is no answer, and an unclosed one neither.

Comparing: both sides normalized (`normalize`), equal as strings. When normalizing raises (a bare
`\\sqrt` at the end, `\\frac` followed by nothing, two `\\text{ ` units), the raw strings are compared.
"""

from typing import Optional

from verl.rewards.real_verl_scores.braces import closing_brace


def last_boxed(text: str) -> Optional[str]:
    """The last boxed expression, `\\boxed{` and the closing brace included (see module doc)."""
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    end = closing_brace(text, start)
    return None if end is None else text[start:end + 1]


class NotBoxed(ValueError):
    """The expression found is not `\\boxed{...}` / `\\boxed ...` (e.g. `\\fbox{5}`): no answer."""


def unbox(expr: str) -> str:
    if "\\boxed " in expr:
        if not expr.startswith("\\boxed "):
            raise NotBoxed(expr)
        return expr[len("\\boxed "):]
    if not (expr.startswith("\\boxed{") and expr.endswith("}")):
        raise NotBoxed(expr)
    return expr[len("\\boxed{"):-1]


def _braced_fracs(s: str) -> str:
    r"""\frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \frac1b -> \frac{1}{b}; a '\frac' followed by
    one character leaves the whole string unchanged; one followed by nothing raises IndexError."""
    head, *parts = s.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}" + (b + rest if b == "{" else "{" + b + "}" + rest)
    return out


def _slash_to_frac(s: str) -> str:
    """'3/4' -> '\\frac{3}{4}' when both sides read as int() and print back as written."""
    sides = s.split("/")
    if len(sides) != 2:
        return s
    try:
        a, b = int(sides[0]), int(sides[1])
    except ValueError:
        return s
    return "\\frac{%d}{%d}" % (a, b) if s == f"{a}/{b}" else s


def _drop_right_units(s: str) -> str:
    """'5 \\text{ cm}' -> '5 '; two '\\text{ ' raise (the caller then compares the raw strings)."""
    if "\\text{ " not in s:
        return s
    pieces = s.split("\\text{ ")
    if len(pieces) != 2:
        raise ValueError("more than one '\\text{ ' unit")
    return pieces[0]


def _braced_sqrts(s: str) -> str:
    r"""\sqrt3 -> \sqrt{3} (one character); '\sqrt' at the very end raises IndexError."""
    head, *parts = s.split("\\sqrt")
    return head + "".join("\\sqrt" + (p if p[0] == "{" else "{" + p[0] + "}" + p[1:]) for p in parts)


VERL_PERCENT_MARKS = ("\\\\%", "\\%")  # real verl's math_reward drops these; a bare '%' stays
PRM800K_PERCENT_MARKS = ("\\%", "%")  # mathruler's copy (PRM800K's grader, geo3k) drops '%' too


def normalize(s: str, percent_marks: tuple = VERL_PERCENT_MARKS) -> str:
    """The MATH normalization, in its order: newlines, '\\!'; '\\\\' -> '\\'; tfrac/dfrac -> frac;
    \\left, \\right, ^{\\circ}, ^\\circ, '\\$' dropped; a '\\text{ ' unit dropped; the percent marks
    dropped; ' .' -> ' 0.', '{.' -> '{0.', a leading '.' -> '0.'; 'k = ' (two characters at most
    before a single '=') dropped; \\sqrt3 -> \\sqrt{3}; spaces dropped; \\frac12 -> \\frac{1}{2};
    exactly '0.5' -> \\frac{1}{2}; 'a/b' of integers -> \\frac{a}{b}. Raises where the rule cannot read
    the string (see the module doc); callers fall back to the string as it was."""
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"),
                     ("\\left", ""), ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", "")):
        s = s.replace(old, new)
    s = _drop_right_units(s)
    for mark in percent_marks:
        s = s.replace(mark, "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    if "\\sqrt" in s:
        s = _braced_sqrts(s)
    s = _braced_fracs(s.replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


def equivalent(answer: str, truth) -> bool:
    if truth is None:
        return False
    try:
        return normalize(answer) == normalize(truth)
    except Exception:  # the normalizer could not read one side: compare as written
        return answer == truth


def score(response: str, ground_truth) -> float:
    try:
        boxed = last_boxed(response)
        return 1.0 if boxed is not None and equivalent(unbox(boxed), ground_truth) else 0.0
    except Exception:  # no readable answer (real verl prints the error and scores 0)
        return 0.0
