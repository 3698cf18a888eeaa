"""Real verl's DAPO-Math rule (verl/utils/reward_score/math_dapo.py there), as its
default_compute_score calls it for math_dapo, math, math_dapo_reasoning and every data_source
starting with 'aime', matched exactly. The result is a dict, as real verl's:

    {"score": 1.0 or -1.0, "acc": bool, "pred": the answer read (normalized), or None}

1. Only the last 300 characters of the response are read.
2. `Answer: ...` (case-insensitive, spaces around ':' allowed): the last such line is the answer;
   it is right when it equals the ground truth after both are normalized (`normalize_final_answer`).
   pred is the normalized answer.
3. No such line, or one that normalizes to '[INVALID]': the last `\\boxed{...}` (exactly that
   spelling: no `\\boxed 7`, no `\\fbox`) within the final 100 of those characters; right when its
   content equals the ground truth as written (not normalized). pred is its content.
4. Neither: pred is '[INVALID]', right only if the ground truth normalizes to '[INVALID]'.

Normalization, in this order: keep the text after the last '='; the replacements of _REPLACE; the
unit words and markup of _DROP deleted; only the first `$...$` span kept; \\text{}, \\textbf{},
\\overline{}, \\boxed{} unwrapped; `frac12` -> `frac{1}{2}`, `sqrt2` -> `sqrt{2}`; '$' dropped;
the commas of a plain integer dropped; outer whitespace stripped.
"""

import re
from typing import Optional

from verl.rewards.real_verl_scores.braces import closing_brace

TAIL_CHARS, BOX_TAIL_CHARS = 300, 100
NO_ANSWER = "[INVALID]"

_REPLACE = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
            (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"))
_DROP = ("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
         "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
         "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
         "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
         ",\\!", "{,}", '"', "\\dots")
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
_UNWRAP = [re.compile(p) for p in (r"(\\text\{)(.*?)(\})", r"(\\textbf\{)(.*?)(\})", r"(\\overline\{)(.*?)(\})",
                                    r"(\\boxed\{)(.*)(\})")]


def normalize_final_answer(text: str) -> str:
    """Canonical form of a final answer (module doc), e.g. '$1,000$ dollars' -> '1000'."""
    s = text.split("=")[-1]
    for old, new in _REPLACE:
        s = s.replace(old, new)
    for word in _DROP:
        s = s.replace(word, "")
    s = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s)
    for pattern in _UNWRAP:
        s = pattern.sub("\\2", s)
    s = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", s)
    s = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def last_boxed_content(text: str) -> Optional[str]:
    """Content of the last `\\boxed{` up to the brace that balances it; None without one (or unclosed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    end = closing_brace(text, start)
    return None if end is None else text[start + len("\\boxed{"):end]


def judge(response: str, ground_truth: str) -> tuple[bool, Optional[str]]:
    """(right, pred) for a response under rules 1-4 of the module doc."""
    tail = response[-TAIL_CHARS:]
    lines = _ANSWER_LINE.findall(tail)
    pred = normalize_final_answer(lines[-1] if lines else NO_ANSWER)
    right = pred == normalize_final_answer(ground_truth)
    if pred != NO_ANSWER:
        return right, pred
    boxed = last_boxed_content(tail[-BOX_TAIL_CHARS:])
    if boxed is not None:
        return boxed == ground_truth, boxed
    return right, pred


def score(response: str, ground_truth: str) -> dict:
    right, pred = judge(response, ground_truth)
    return {"score": 1.0 if right else -1.0, "acc": right, "pred": pred}
