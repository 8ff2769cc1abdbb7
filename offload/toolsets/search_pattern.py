"""The pattern language of ``search_files``: RE2 (``google-re2``), matched in linear time.

Owns compiling a model's pattern. Python's ``re`` backtracks: ``(a+)+$`` on 41 characters runs
for minutes inside one C call that holds the GIL, so neither an interrupt nor Ctrl-C nor any
other thread of the process gets to run -- a gateway, worker or MCP server would freeze with
every child it runs. RE2 matches in time linear in the text and never backtracks, and its
compiled program is bounded (``_MAX_MEM_BYTES``), so no pattern can freeze the process.

Invariant: every pattern is compiled here; what RE2 does not support (backreferences,
lookahead and lookbehind, possessive quantifiers) is refused with an error that names the
construct and the way around it, never run by a backtracking engine instead.
"""
from __future__ import annotations

import re
from typing import Any

import re2

from offload.toolsets.toolspec import ToolError

MAX_PATTERN_CHARS = 2_000
_MAX_MEM_BYTES = 8 << 20  # RE2's bound on one compiled program (its default)

SYNTAX_NOTE = ("RE2 syntax (Python-like: classes, groups, alternation, \\b, (?i); no backreferences "
               "such as \\1, no lookahead/lookbehind such as (?=...) or (?<!...)), matched per line in linear time")

_BACKREFERENCE = ("a backreference (\\1, (?P=name))",
                  "search for the text itself, or for a looser pattern and check the hits with read_file")
# RE2's parser's words for what it lacks, and what the model should write instead.
_UNSUPPORTED = (
    (re.compile(r"invalid escape sequence: \\[1-9g]"), *_BACKREFERENCE),
    (re.compile(r"invalid perl operator: \(\?P$"), *_BACKREFERENCE),
    (re.compile(r"invalid perl operator: \(\?="), "a lookahead (?=...)", "match the following text as part of the pattern"),
    (re.compile(r"invalid perl operator: \(\?!"), "a negative lookahead (?!...)",
     "search more broadly and leave the unwanted hits out yourself"),
    (re.compile(r"invalid perl operator: \(\?<[=!]"), "a lookbehind (?<=...) or (?<!...)",
     "match the preceding text as part of the pattern"),
    (re.compile(r"bad repetition operator: .\+"), "a possessive quantifier (*+, ++, ?+)", "drop the trailing +"),
    (re.compile(r"invalid escape sequence: \\Z"), "\\Z", "use $ (end of the line)"),
)


def compile_search_pattern(pattern: str, ignore_case: bool, tool: str = "search_files") -> Any:
    """``pattern`` compiled by RE2 (its ``search(line)`` as ``re``'s), or a ToolError that says
    what is wrong with it and how to write it instead."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"{tool}: the pattern is {len(pattern)} characters long, over {MAX_PATTERN_CHARS}; "
                        "search for a shorter, more specific pattern.")
    options = re2.Options()
    options.log_errors = False  # the error goes to the model, not to offload's stderr
    options.case_sensitive = not ignore_case
    options.max_mem = _MAX_MEM_BYTES
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        raise ToolError(_explain(pattern, _error_text(exc), tool)) from exc


def _error_text(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


def _explain(pattern: str, detail: str, tool: str) -> str:
    for said, construct, instead in _UNSUPPORTED:
        if said.match(detail):
            return (f"{tool}: pattern {pattern!r} uses {construct}, which the search engine does not support: "
                    f"patterns are {SYNTAX_NOTE}. Instead, {instead}.")
    if "pattern too large" in detail or "invalid repetition size" in detail:
        return (f"{tool}: pattern {pattern!r} is too large to run ({detail}); repeat counts go up to 1000 and "
                "nested repeats multiply: use smaller counts or a simpler pattern.")
    return (f"{tool}: pattern {pattern!r} is not a valid regular expression ({detail}); patterns are {SYNTAX_NOTE}. "
            "Escape special characters such as ( [ . * + ? with a backslash.")
