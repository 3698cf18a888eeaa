"""`math_dapo` reward: real verl's DAPO-Math scorer (its default for data sources math_dapo, math,
math_dapo_reasoning and aime*; verl/utils/reward_score/math_dapo.py there).

Only the last 300 characters of the response are read (the longest MATH-500 answer has 159):

1. the last `Answer: ...` line (case-insensitive), normalized, equal to the normalized ground truth;
2. with no such line, the content of the last `\\boxed{...}` within the final 100 characters, equal
   to the ground truth as given (not normalized);
3. neither: wrong.

score = 1.0 if right, -1.0 otherwise (not 0: DAPO's reward is +-1).

Normalization (`normalize_final_answer`), in this order: keep the text after the last '=';
apply the replacements of _REPLACE; delete the unit words and markup of _DROP; keep only the
first `$...$` span; unwrap \\text{}, \\textbf{}, \\overline{}, \\boxed{}; `frac12` -> `frac{1}{2}`,
`sqrt2` -> `sqrt{2}`; drop '$'; drop thousands commas of a plain integer; strip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import re
from typing import Optional

from verl.rewards.base import RewardFn, per_sample
from verl.rewards.verifiable import extract_boxed

_REPLACE = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
            (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"))
_DROP = ("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
         "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
         "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
         "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
         ",\\!", "{,}", '"', "\\dots")
_ANSWER = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
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


def last_boxed(text: str) -> Optional[str]:
    """Content of the last `\\boxed{...}` (braces balanced), None if there is none."""
    start = text.rfind("\\boxed{")
    return None if start < 0 else extract_boxed(text[start:])


def dapo_correct(response: str, ground_truth: str) -> bool:
    tail = response[-300:]
    answers = _ANSWER.findall(tail)
    if answers:
        return normalize_final_answer(answers[-1]) == normalize_final_answer(ground_truth)
    return last_boxed(tail[-100:]) == ground_truth  # None (no box) is never equal: wrong


def build_math_dapo(cfg: RewardFnConfig) -> RewardFn:
    def math_dapo(prompt, response, sample):
        truth = sample["ground_truth"]
        if truth is None:
            raise ValueError("this reward needs sample['ground_truth'] (set data.answer_key)")
        return 1.0 if dapo_correct(response, str(truth)) else -1.0

    return per_sample(math_dapo, "math_dapo")
