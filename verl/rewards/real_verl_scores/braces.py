"""Brace matching as real verl's boxed-answer extractors count it."""

from typing import Optional


def closing_brace(text: str, start: int) -> Optional[int]:
    """Index of the '}' at which the braces counted from text[start] on first balance (each '{' adds
    one, each '}' takes one away, and only a '}' that brings the count back to 0 closes: a '}' before
    any '{' takes it below 0). None when the count never comes back."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None
