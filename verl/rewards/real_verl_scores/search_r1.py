"""Real verl's Search-R1 exact-match rule (verl/utils/reward_score/search_r1_like_qa_em.py there),
as its default_compute_score calls it for the searchR1_* data sources, matched exactly:

* the answer is the stripped text of the last `<answer>...</answer>` (across lines); none: 0.0;
* it is right when, normalized, it equals one of `ground_truth["target"]` normalized (a single
  string is one target). Normalized: lower case, ASCII punctuation removed, the words a/an/the
  replaced by a space, whitespace runs collapsed to one space;
* right: 1.0, or 0.25 when the response has more than 10 `<answer>` or more than 10 `</answer>`
  tags (answer spamming); wrong: 0.0.

A ground truth without "target" (a plain string, say) is an error when there is an answer to check,
as it is in real verl.
"""

import re
import string

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)
MAX_TAGS = 10


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def last_answer(response: str):
    found = _ANSWER.findall(response)
    return found[-1].strip() if found else None


def score(response: str, ground_truth) -> float:
    answer = last_answer(response)
    if answer is None:
        return 0.0  # the ground truth is not read
    targets = ground_truth["target"]
    if isinstance(targets, str):
        targets = [targets]
    said = normalize_answer(answer)
    if not any(normalize_answer(t) == said for t in targets):
        return 0.0
    spammed = response.count("<answer>") > MAX_TAGS or response.count("</answer>") > MAX_TAGS
    return 0.25 if spammed else 1.0
