"""A user reward function for `reward_fn.type: python`.

    reward_fn:
      type: python
      function: examples/reward_fn_example.py:polite_and_brief

verl calls it once per batch with three lists of equal length B and expects B floats:

    prompts:   the prompt texts (as the actor saw them, chat template included)
    responses: the generated texts
    samples:   dicts with ground_truth, data_source, extra (dict), response_length (tokens),
               max_response_length (tokens), truncated (bool: hit the token limit)

Raise, or return NaN/None, for a sample you cannot score: `on_error: fail` stops the run
with a message showing that sample; `on_error: zero` scores it 0 and counts it in the
`reward/errors` metric.
"""

POLITE_WORDS = ("please", "thank", "glad", "happy to")


def polite_and_brief(prompts: list[str], responses: list[str], samples: list[dict]) -> list[float]:
    """+1 for a polite word, minus the fraction of the token budget used, -1 if cut off."""
    scores = []
    for response, sample in zip(responses, samples):
        text = response.lower()
        polite = 1.0 if any(w in text for w in POLITE_WORDS) else 0.0
        budget = max(1, sample["max_response_length"])
        brevity = -sample["response_length"] / budget
        cut_off = -1.0 if sample["truncated"] else 0.0
        scores.append(polite + brevity + cut_off)
    return scores
