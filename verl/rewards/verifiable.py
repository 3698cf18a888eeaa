"""Our own lenient verifiable math rewards: GSM8K '#### n' answers, MATH '\\boxed{...}' answers,
last number (reward types gsm8k, math, number, format).

These are more lenient than real verl's scorers (verl.rewards.real_verl_scores, which
`by_data_source` and main_ppo use): they read the whole response, accept `####5`, `#### $5` and
'\\fbox{}', drop thousands commas and `\\text{}`, and compare numbers by *value*: exactly, as
fractions of the decimals written ('3.0' == '3', '.5' == '0.5' == '1/2'), with no tolerance, so
'1000001' is not '1000000'.

The extraction and comparison helpers are pure functions (tested on their own):

    extract_gsm8k_answer("... #### 1,234")          -> "1234"
    extract_last_number("3 apples, then -2.5.")     -> "-2.5"
    extract_boxed("so \\boxed{\\frac{1}{2}}.")       -> "\\frac{1}{2}"
    numbers_equal("3.0", "3")                       -> True
    math_answers_equal("\\dfrac{1}{2}", "0.5")      -> True

Scoring (gsm8k, math, number): 1.0 if the extracted answer equals the ground truth,
`format_score` if an answer was extracted but is wrong, 0.0 if none could be extracted.
A missing ground truth is a per-sample error (see `on_error`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the section type, for hints only: rewards sit below the config package
    from verl.config import RewardFnConfig

import re
from fractions import Fraction
from typing import Optional

from verl.rewards.base import RewardFn, per_sample
from verl.rewards.real_verl_scores.braces import closing_brace

# A number: optional sign, optional '$', digits with optional thousands commas, optional decimals.
# The look-behind keeps '3-5' from reading as '-5' and 'x2' from reading as '2'.
_NUM = r"(?<![\w.])(?P<sign>[-\u2212])?\s?\$?\s?(?P<body>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
_NUM_RE = re.compile(_NUM)
_HASH_RE = re.compile(r"####\s*\$?\s*(?P<sign>[-\u2212])?\s?\$?\s?(?P<body>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")


def _number_text(match: re.Match) -> str:
    body = match.group("body").replace(",", "")
    return ("-" if match.group("sign") else "") + body


def normalize_number(text: Optional[str]) -> Optional[str]:
    """'$1,234.50.' -> '1234.50'; None when `text` is not a single number."""
    if text is None:
        return None
    t = str(text).strip().rstrip(".").strip()
    m = _NUM_RE.fullmatch(t)
    return _number_text(m) if m else None


def extract_last_number(text: str) -> Optional[str]:
    """The last number in `text`, commas and '$' removed (None if there is none)."""
    matches = list(_NUM_RE.finditer(text or ""))
    return _number_text(matches[-1]) if matches else None


def extract_gsm8k_answer(text: str, strict: bool = False) -> Optional[str]:
    """The answer of a GSM8K-style response.

    strict: only a number right after the last '####' counts.
    flexible: the number after the last '####' if there is one, else the last number in the text.
    """
    matches = list(_HASH_RE.finditer(text or ""))
    if matches:
        return _number_text(matches[-1])
    return None if strict else extract_last_number(text)


def exact_value(text: Optional[str]) -> Optional[Fraction]:
    """The exact value of a decimal number string ('-.50' -> -1/2), None for anything else (also 'inf', 'nan')."""
    if text is None:
        return None
    t = str(text).strip().replace("\u2212", "-")
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)", t):
        return None
    return Fraction(t)


def numbers_equal(a: Optional[str], b: Optional[str]) -> bool:
    """Exact numeric equality of two number strings ('3.0' == '3', '-0.50' == '-.5'; '1000001' != '1000000':
    no tolerance)."""
    x, y = exact_value(a), exact_value(b)
    return x is not None and y is not None and x == y


def extract_boxed(text: str) -> Optional[str]:
    """Content of the last \\boxed{...} (or \\fbox{...}), nested braces kept; '\\boxed 5' too."""
    text = text or ""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        end = closing_brace(text, i)
        return None if end is None else text[i + 1:end]  # None: unbalanced
    if i == start + len("\\boxed") or i >= len(text):
        return None  # '\boxedx' or nothing after it
    m = re.match(r"[^\s$]+", text[i:])
    return m.group(0).rstrip(".") if m else None


def _strip_command(s: str, name: str) -> str:
    """Replace \\name{X} by X (innermost braces balanced)."""
    out, key = s, "\\" + name + "{"
    while key in out:
        a = out.index(key)
        depth, j = 0, a + len(key) - 1
        for j in range(a + len(key) - 1, len(out)):
            depth += {"{": 1, "}": -1}.get(out[j], 0)
            if depth == 0:
                break
        else:
            break
        out = out[:a] + out[a + len(key):j] + out[j + 1:]
    return out


def normalize_math_answer(s: Optional[str]) -> Optional[str]:
    """A canonical string for a LaTeX answer: spacing, \\left/\\right, \\dfrac, \\text{}, units
    of degrees/percent, a leading 'x =', '$' and a trailing period removed."""
    if s is None:
        return None
    s = str(s).strip()
    for name in ("text", "textbf", "mathrm", "mbox"):
        s = _strip_command(s, name)
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\:", ""),
                     ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("^{\\circ}", ""), ("^\\circ", ""),
                     ("\\%", ""), ("%", ""), ("\\$", ""), ("$", ""), ("{,}", "")):
        s = s.replace(old, new)
    s = re.sub(r"\s+", "", s)
    s = re.sub(r"^[a-zA-Z]=", "", s)  # 'x=5' -> '5'
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)  # \frac12 -> \frac{1}{2}
    s = s.rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def math_to_number(s: Optional[str]) -> Optional[Fraction]:
    """Exact value of a normalised answer that is a number, 'a/b' or '\\frac{a}{b}' (else None)."""
    if not s:
        return None
    m = re.fullmatch(r"(-?)\\frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", s) or re.fullmatch(r"(-?)(-?[\d.]+)/(-?[\d.]+)", s)
    if not m:
        return exact_value(s)
    num, den = exact_value(m.group(2)), exact_value(m.group(3))
    if num is None or den is None or den == 0:
        return None
    return -num / den if m.group(1) else num / den


def math_answers_equal(pred: Optional[str], truth: Optional[str]) -> bool:
    """Equal as normalised strings, or exactly equal values when both parse as numbers (no tolerance)."""
    a, b = normalize_math_answer(pred), normalize_math_answer(truth)
    if a is None or b is None or a == "":
        return False
    if a == b:
        return True
    x, y = math_to_number(a), math_to_number(b)
    return x is not None and y is not None and x == y


def ground_truth_number(ground_truth) -> str:
    """The reference number: after '####' in a GSM8K solution, inside \\boxed, or the text itself."""
    if ground_truth is None:
        raise ValueError("this reward needs sample['ground_truth'] (set data.answer_key)")
    text = str(ground_truth)
    value = extract_gsm8k_answer(text, strict=True) if "####" in text else None
    if value is None and "\\boxed" in text:
        value = normalize_number(extract_boxed(text))
    if value is None:
        value = normalize_number(text)
    if value is None:
        raise ValueError(f"ground truth {text[:60]!r} is not a number")
    return value


def _graded(pred: Optional[str], correct: bool, format_score: float) -> float:
    if pred is None:
        return 0.0
    return 1.0 if correct else float(format_score)


def build_gsm8k(cfg: RewardFnConfig) -> RewardFn:
    strict, fmt = cfg.strict, cfg.format_score

    def gsm8k(prompt, response, sample):
        truth = ground_truth_number(sample["ground_truth"])
        pred = extract_gsm8k_answer(response, strict=strict)
        return _graded(pred, numbers_equal(pred, truth), fmt)

    return per_sample(gsm8k)


def build_math(cfg: RewardFnConfig) -> RewardFn:
    fmt = cfg.format_score

    def math_reward(prompt, response, sample):
        gt = sample["ground_truth"]
        if gt is None:
            raise ValueError("this reward needs sample['ground_truth'] (set data.answer_key)")
        truth = extract_boxed(str(gt)) if "\\boxed" in str(gt) else str(gt)
        pred = extract_boxed(response)
        return _graded(pred, math_answers_equal(pred, truth), fmt)

    return per_sample(math_reward, "math")


def build_number(cfg: RewardFnConfig) -> RewardFn:
    fmt = cfg.format_score

    def number(prompt, response, sample):
        truth = ground_truth_number(sample["ground_truth"])
        pred = extract_last_number(response)
        return _graded(pred, numbers_equal(pred, truth), fmt)

    return per_sample(number)


# What may follow the final '#### <number>': closing punctuation, quotes, markup, end-of-turn text.
_AFTER_FINAL_NUMBER = re.compile(r"[\s.,;:!?)\]}*_`'\"]*")


def has_final_answer(response: str) -> bool:
    """True if the response ends its reasoning with '#### <number>' (only punctuation may follow the
    number: '#### 3 + 7 = 10' puts an expression, not the answer, after the mark, and the gsm8k
    scorer would read 3) or holds a non-empty \\boxed{...}."""
    matches = list(_HASH_RE.finditer(response or ""))
    if matches and _AFTER_FINAL_NUMBER.fullmatch(response[matches[-1].end():]):
        return True
    boxed = extract_boxed(response)
    return bool(boxed and boxed.strip())


def build_format(cfg: RewardFnConfig) -> RewardFn:
    return per_sample(lambda p, r, s: 1.0 if has_final_answer(r) else 0.0, "format")
