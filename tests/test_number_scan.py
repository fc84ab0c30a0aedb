"""The pre-scan for numbers that overflow a double (issue 28, point 1: every input costs linear time).

Every body a client sends and every message an upstream sends is scanned for a literal that may overflow (an
exponent of 100 or more, 200 digits or more) before its parse is walked for infinities. With Python's `re`, the
`[0-9]{200}` branch was tried afresh at every digit: a 4 MB body of 199-digit runs (in strings, where any text is
fine) cost 0.5 s on the loop, a plain string of 4 MB 55 ms. The scan is RE2's now (linear, one pass); these tests
generate the texts it must find, and the texts of the backtracking class.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import consumers
from consumers import loads, may_overflow
from exposers._wire import ParseError, parse_json


def overflows(text: str) -> bool:
    """The reference: whether Python's own parse of `text` holds a number that is not finite."""
    found: list[bool] = []

    def walk(value: Any) -> None:
        if isinstance(value, float):
            found.append(not math.isfinite(value))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(text))
    return any(found)


DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=400).map(lambda d: d.lstrip("0") or "0")
NUMBERS = st.one_of(
    DIGITS,
    st.builds(lambda m, e, sign: f"{m}e{sign}{e}", DIGITS, st.integers(min_value=0, max_value=1000),
              st.sampled_from(["", "+", "-"])),
    st.builds(lambda i, f, e: f"{i}.{f}E{e}", DIGITS, DIGITS, st.integers(min_value=0, max_value=400)))


@settings(max_examples=500, deadline=None)
@given(st.lists(NUMBERS, min_size=1, max_size=5))
def test_every_number_that_overflows_is_found_by_the_scan(numbers: list[str]) -> None:
    text = "[" + ",".join(numbers) + "]"
    if overflows(text):
        assert may_overflow(text) and may_overflow(text.encode())
        # beside a long string, a client's body has its few values walked instead of its bytes scanned
        for body in (text, '["' + "a" * 10_000 + '",' + text[1:]):
            with pytest.raises(ParseError, match="out of range"):
                parse_json(body.encode())
        assert None in loads(text)


@pytest.mark.parametrize("text", [
    json.dumps(["1" * 199 + " "] * 2000),  # digit runs one short of the branch, in strings
    json.dumps(["e" + "0" * 150 + "1"] * 100),  # an exponent's zeros
    json.dumps("a" * 100_000),
    json.dumps([1.5e99, 123456789] * 1000),
])
def test_text_without_an_overflowing_number_passes_the_scan(text: str) -> None:
    assert not may_overflow(text) and not may_overflow(text.encode())
    assert parse_json(text.encode()) == json.loads(text)


def test_no_backtracking_regex_scans_for_numbers() -> None:
    """Python's `re` tries the pattern again at every offset (quadratic in a digit run's length); RE2 does not.
    No pattern of the JSON codec that scans foreign text is one of Python's."""
    codec = vars(consumers._json)
    scanners = [value for name, value in codec.items() if "NUMBER" in name]
    assert scanners and not any(isinstance(value, re.Pattern) for value in scanners)
