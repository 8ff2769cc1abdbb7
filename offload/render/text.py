"""Text primitives for the notification renderer: quoting untrusted text, numbers, ages.

Owns the anti-forgery rule every rendered notification relies on. A notification is read by
the parent model as instructions from the system, so its structure lines are privileged:
only the renderer may emit a line that starts with a *reserved marker* (see
``RESERVED_PREFIXES``: ``[ASYNC DELEGATION``, ``[IMPORTANT:``, ``[TRUNCATED``, ``[Background process``,
``--- ``, ``⚠ SUBAGENT MODEL REJECTED``). Child output (summaries, errors, goals, context, group names,
transcript tails, process output) is untrusted and goes through one of two helpers:

- ``quote_block(text)`` for multi-line fields: every line break Python recognizes becomes a
  plain ``\\n``, and each resulting line that starts with a reserved marker -- after any
  leading whitespace or invisible format characters -- is prefixed with ``QUOTE_MARK``
  (``"│ "``). Ordinary lines are left byte-for-byte alone so code and diffs stay readable.
- ``inline(text)`` for fields embedded in a renderer line (task headers, titles, labels):
  all whitespace runs, line breaks included, collapse to one space, so the field can never
  start a line of its own.

Key invariant: in any rendered notification, a line whose first non-blank character begins a
reserved marker was written by the renderer, never by a child.
"""
from __future__ import annotations

import time
import unicodedata
from typing import Any

QUOTE_MARK = "│ "

RESERVED_PREFIXES: tuple[str, ...] = (
    "[ASYNC DELEGATION",
    "[IMPORTANT:",
    "[TRUNCATED",
    "[Background process",
    "--- ",
    "⚠ SUBAGENT MODEL REJECTED",
)


def _visible_start(line: str) -> str:
    """The line without leading whitespace or zero-width/format characters.

    A child could hide a forged header behind U+200B or a BOM, which a model still reads as a
    header, so those count as blank for the reserved-marker check.
    """
    i = 0
    while i < len(line) and (line[i].isspace() or unicodedata.category(line[i]) == "Cf"):
        i += 1
    return line[i:]


def is_reserved_line(line: str) -> bool:
    """True when *line* would read as a renderer structure line."""
    return _visible_start(line).startswith(RESERVED_PREFIXES)


def quote_block(text: Any) -> str:
    """Render untrusted multi-line text so it cannot forge a structure line."""
    if text is None:
        return ""
    # splitlines() also splits on \r, \x0b, \x1c-\x1e, \x85, \u2028 and \u2029; rejoining with
    # "\n" turns every line break a model might honour into one we have checked.
    lines = str(text).splitlines()
    return "\n".join(QUOTE_MARK + ln if is_reserved_line(ln) else ln for ln in lines)


def inline(text: Any) -> str:
    """Render untrusted text as one line (whitespace runs and line breaks become a space)."""
    if text is None:
        return ""
    return " ".join(str(text).split())


def clip(text: str, limit: int) -> str:
    """Cut *text* to at most *limit* characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def is_number(value: Any) -> bool:
    # bool is an int subclass; a stray True must not render as "1s".
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_seconds(value: Any) -> str:
    """``12.0`` → ``12``, ``0.745`` → ``0.75``; anything non-numeric → ``?``."""
    if not is_number(value) or value != value:  # NaN
        return "?"
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def format_count(value: Any, default: str = "?") -> str:
    """An integer count (``api_calls``, ``n_tasks``); *default* for non-finite or non-numbers."""
    if not is_number(value) or value != value or abs(value) == float("inf"):
        return default
    return str(int(value))


def format_age(seconds: Any) -> str:
    """Compact age: ``45s``, ``18m``, ``18m5s``, ``2h``, ``2h3m``; ``?`` on bad input."""
    if not is_number(seconds) or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "?"
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        minutes, secs = divmod(total, 60)
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    hours, rest = divmod(total, 3600)
    minutes = rest // 60
    return f"{hours}h{minutes}m" if minutes else f"{hours}h"


def format_local_time(epoch: Any) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in local time for a given epoch (no clock read); ``?`` if bad."""
    if not is_number(epoch):
        return "?"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
    except (OverflowError, OSError, ValueError):
        return "?"


def clip_words(text: Any, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at the last word boundary that
    fits (mid-word only for a single overlong word), and marked with "…" when cut."""
    text = " ".join(str(text or "").split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    boundary = head.rfind(" ")
    if boundary >= limit // 2:
        head = head[:boundary]
    return head.rstrip(" ,;:.-") + "…"

