"""Text primitives: quoting untrusted text, ages, seconds, counts, local time."""
from __future__ import annotations

import pytest

from offload.render.text import (
    QUOTE_MARK,
    clip,
    format_age,
    format_count,
    format_local_time,
    format_seconds,
    inline,
    is_reserved_line,
    quote_block,
)


@pytest.mark.parametrize("seconds, expected", [
    (0, "0s"), (45, "45s"), (59.9, "59s"), (60, "1m"), (18 * 60, "18m"), (18 * 60 + 5, "18m5s"),
    (7200, "2h"), (7200 + 180, "2h3m"), (7200 + 59, "2h"), (50 * 3600, "50h"),
    (-1, "?"), (None, "?"), ("12", "?"), (True, "?"), (float("nan"), "?"), (float("inf"), "?"),
])
def test_format_age(seconds, expected):
    assert format_age(seconds) == expected


@pytest.mark.parametrize("value, expected", [
    (12.0, "12"), (12, "12"), (0.745, "0.74"), (0.746, "0.75"), (3.5, "3.5"), (0, "0"),
    (None, "?"), ("3", "?"), (False, "?"), (float("nan"), "?"),
])
def test_format_seconds(value, expected):
    assert format_seconds(value) == expected


@pytest.mark.parametrize("value, expected", [(4, "4"), (4.9, "4"), (None, "?"), (float("inf"), "?"), (True, "?")])
def test_format_count(value, expected):
    assert format_count(value) == expected


def test_format_local_time_uses_the_given_epoch_in_local_zone():
    assert format_local_time(1000.0) == "1970-01-01 00:16:40"  # conftest pins TZ=UTC
    assert format_local_time("x") == "?"
    assert format_local_time(1e300) == "?"


@pytest.mark.parametrize("line, reserved", [
    ("[ASYNC DELEGATION COMPLETE — x]", True), ("   [IMPORTANT: x]", True), ("--- RESULT ---", True),
    ("\ufeff[TRUNCATED", True), ("[Background process p]", True), ("⚠ SUBAGENT MODEL REJECTED", True),
    ("---", False), ("--x", False), ("[async delegation", False), ("│ [ASYNC DELEGATION", False),
    ("text [ASYNC DELEGATION", False),
])
def test_reserved_lines(line, reserved):
    assert is_reserved_line(line) is reserved


def test_quote_block_marks_only_reserved_lines_and_normalizes_breaks():
    text = "keep\r--- a/file.py\u2028  body\n[IMPORTANT: x]\n"
    assert quote_block(text) == f"keep\n{QUOTE_MARK}--- a/file.py\n  body\n{QUOTE_MARK}[IMPORTANT: x]"
    assert quote_block(None) == ""


def test_inline_collapses_every_line_break():
    assert inline("a\nb\r\nc\u2028d\x85e\t f") == "a b c d e f"
    assert inline(None) == ""
    assert inline(3) == "3"


def test_clip():
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefg", 6) == "abcde…"
