"""Real verl's GSM8K rule (verl/utils/reward_score/gsm8k.py there, `strict`, as its
default_compute_score calls it for `openai/gsm8k`), matched exactly:

1. only the last 300 characters of the response are read;
2. the answer is the last `#### ` (four hashes, one ASCII space) followed by a run of ASCII digits,
   '.', ',' with an optional leading '-'; its commas are dropped (`#### 1,000` -> '1000');
3. 1.0 if that text equals the ground truth *as a string* ('72' != '72.0', '072', '72.'), 0.0
   otherwise, and 0.0 when there is no such answer.

`####0`, `#### $5`, `####  5` and fullwidth digits have no answer; a ground truth that is not the
bare answer string (a full solution, a number) is never equal.

`flexible` (what real verl's GSM8K tool calls): the answer is the last run of those characters
in the last 300 characters that is not '' or '.', with or without `#### `.
"""

import re

TAIL_CHARS = 300
_MARKED = re.compile(r"#### (-?[0-9.,]+)")  # [0-9], not \d: ASCII digits only
_ANY = re.compile(r"(-?[0-9.,]+)")


def extract_answer(response: str):
    """The text after the last '#### ' in the last 300 characters, commas removed; None without one."""
    found = _MARKED.findall(response[-TAIL_CHARS:])
    return found[-1].replace(",", "") if found else None


def score(response: str, ground_truth) -> float:
    answer = extract_answer(response)
    return 1.0 if answer is not None and answer == ground_truth else 0.0


def extract_flexible(response: str):
    """The last number-like run ('-', digits, '.', ',') of the last 300 characters that is not '.',
    as written (commas kept, as real verl's flexible rule keeps them); None without any run. When every
    run is '.', real verl's loop ends on the first one, so that is the answer (it equals no truth)."""
    found = _ANY.findall(response[-TAIL_CHARS:])
    valid = [m for m in found if m not in ("", ".")]
    return valid[-1] if valid else (found[0] if found else None)


def compute_score(response: str, ground_truth, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0) -> float:
    """Real verl's gsm8k.compute_score: `score` when the extracted answer equals the ground truth as a
    string, `format_score` when one was extracted but differs, 0 without one."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    answer = extract_answer(response) if method == "strict" else extract_flexible(response)
    if answer is None:
        return 0.0
    return score if answer == ground_truth else format_score
