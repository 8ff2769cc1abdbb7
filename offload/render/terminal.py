"""Text anyone could have written, made inert for a terminal: ``inert(text)``.

A goal, a child's summary or error, a tool name or a ledger row (written by any host on a
shared ledger) may hold control characters. Printed raw they are instructions to the terminal,
not text: ``ESC [2J`` clears the screen, ``ESC ]0;…BEL`` retitles the window, ``ESC ]8;;URL``
makes a link that says something else, a CR overwrites the line already shown, the single
byte CSI (U+009B) does what ``ESC [`` does on some terminals, and the bidirectional overrides
reorder what the reader sees. Every CLI view passes such text through ``inert`` first.

Invariant: ``inert``'s result holds no C0 control but a newline (where the caller keeps them)
and a tab, no DEL, no C1 control, no bidirectional or line/paragraph separator; each one
removed is shown visibly as its escape (``\\x1b``, ``\\r``, ``\\u202e``), so nothing is
hidden from the reader either. Pure: no I/O.
"""
from __future__ import annotations

from typing import Any

_NAMED = {"\r": "\\r", "\n": "\\n", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\a": "\\a"}
_FORMAT = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_UNSAFE = [*(c for c in range(0x20) if c != 0x09), 0x7F, *range(0x80, 0xA0), *_FORMAT]
_ONE_LINE = str.maketrans({code: _escape(code) for code in _UNSAFE})
_LINES = str.maketrans({code: _escape(code) for code in _UNSAFE if code != 0x0A})


def inert(text: Any, keep_newlines: bool = True) -> str:
    """``text`` (any value: ``str()`` of it) with every terminal control character escaped
    visibly; newlines kept unless ``keep_newlines`` is False (a one-line field)."""
    return str(text).translate(_LINES if keep_newlines else _ONE_LINE)


# JSON escapes only C0 controls itself (``ensure_ascii=False`` leaves the rest raw); the others
# can only stand inside a JSON string, where ``\uXXXX`` is the same character to any parser.
_JSON = str.maketrans({code: f"\\u{code:04x}" for code in _UNSAFE if code >= 0x7F})


def inert_json(document: str) -> str:
    """A JSON document (``json.dumps`` output) with every terminal control character in it
    written as its ``\\uXXXX`` escape: the same data to a parser, inert on a terminal."""
    return document.translate(_JSON)
