"""Real verl's GSM8K rule (verl/utils/reward_score/gsm8k.py there, `strict`, as its
default_compute_score calls it for `openai/gsm8k`), matched exactly:

1. only the last 300 characters of the response are read;
2. the answer is the last `#### ` (four hashes, one ASCII space) followed by a run of ASCII digits,
   '.', ',' with an optional leading '-'; its commas are dropped (`#### 1,000` -> '1000');
3. 1.0 if that text equals the ground truth *as a string* ('72' != '72.0', '072', '72.'), 0.0
   otherwise, and 0.0 when there is no such answer.

`####0`, `#### $5`, `####  5` and fullwidth digits have no answer; a ground truth that is not the
bare answer string (a full solution, a number) is never equal.
"""

import re

TAIL_CHARS = 300
_MARKED = re.compile(r"#### (-?[0-9.,]+)")  # [0-9], not \d: ASCII digits only


def extract_answer(response: str):
    """The text after the last '#### ' in the last 300 characters, commas removed; None without one."""
    found = _MARKED.findall(response[-TAIL_CHARS:])
    return found[-1].replace(",", "") if found else None


def score(response: str, ground_truth) -> float:
    answer = extract_answer(response)
    return 1.0 if answer is not None and answer == ground_truth else 0.0
