"""The number a model's answer gives, GSM8K's way: read by the safety data (labels) and metrics (accuracy).

The number is the first one after ``The final answer is:`` (the first occurrence of the marker,
case-insensitive), else the last number of the text, compared in :func:`canonical_number` form.
"""

from __future__ import annotations

import re
from decimal import Decimal

FINAL_ANSWER_MARKER = re.compile(r"the final answer is:", re.IGNORECASE)
# 12, -3, 4.5, 1,234 (thousands commas); a hyphen after a word or number is no minus: 7-5, AC-4821
NUMBER = re.compile(r"(?:(?<![\w.])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")


def canonical_number(number: str) -> str:
    """``number`` without thousands commas, a leading ``+`` or trailing decimal zeros: ``"1,200.50"`` ->
    ``"1200.5"``, ``"12.0"`` -> ``"12"``, ``"-0"`` -> ``"0"``; so equal numbers have equal strings."""
    value = Decimal(number.replace(",", ""))
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_final_answer(text: str) -> str | None:
    """The answer number of ``text`` (see the module docstring) in :func:`canonical_number` form; None if none."""
    marker = FINAL_ANSWER_MARKER.search(text)
    if marker is not None and (after := NUMBER.search(text, marker.end())) is not None:
        return canonical_number(after.group())
    numbers = NUMBER.findall(text)
    return canonical_number(numbers[-1]) if numbers else None
