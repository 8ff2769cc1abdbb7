"""Telegram message text: HTML escaping and splitting at the 4,096-character limit.

We send with ``parse_mode=HTML``. Our header is bold; the body (child output, agent answers)
is escaped with ``html.escape`` so it can neither break the markup nor forge a bold header of
ours. Splitting works on the escaped text, on line boundaries; a single line longer than the
limit is cut between characters but never inside an entity (``&amp;``). Lengths are counted
in UTF-16 code units, as Telegram counts them, so an emoji-heavy part cannot overflow.

Invariant: joining the parts' lines (minus the header) gives back every line of the body.
"""
from __future__ import annotations

import html

MAX_MESSAGE_CHARS = 4096
_LONGEST_ENTITY = len("&quot;")


def telegram_length(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units (a character outside the BMP is 2)."""
    return len(text.encode("utf-16-le")) // 2


def render_parts(body: str, header: str = "", limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """HTML message texts, each at most ``limit`` long, that together carry the whole body."""
    if limit < 4 * _LONGEST_ENTITY:
        raise ValueError(f"limit must be at least {4 * _LONGEST_ENTITY} characters, got {limit}")
    head = _bold_header(header, limit // 2)
    lines = [head] if head else []
    parts: list[str] = []
    size = telegram_length(head)
    for line in (body if body.strip() else "(empty)").split("\n"):
        for piece in _pieces(html.escape(line, quote=False), limit):
            added = telegram_length(piece) + (1 if lines else 0)
            if lines and size + added > limit:
                parts.append("\n".join(lines))
                lines, size, added = [], 0, telegram_length(piece)
            lines.append(piece)
            size += added
    parts.append("\n".join(lines))
    return [p for p in parts if p.strip()]  # Telegram refuses a blank text; the body never is one


def _bold_header(header: str, limit: int) -> str:
    """``header`` in bold, cut (with "…") so the markup fits in ``limit``; "" for no header."""
    head, cut = f"<b>{html.escape(header)}</b>", len(header)
    while cut > 1 and telegram_length(head) > limit:
        cut -= 1
        head = f"<b>{html.escape(header[:cut])}…</b>"
    return head if header and telegram_length(head) <= limit else ""


def _pieces(escaped: str, limit: int) -> list[str]:
    """``escaped`` in chunks of at most ``limit``, never splitting an ``&...;`` entity."""
    pieces = []
    while telegram_length(escaped) > limit:
        cut = limit
        while telegram_length(escaped[:cut]) > limit:
            cut -= 1  # surrogate pairs count twice
        amp = escaped.rfind("&", max(0, cut - _LONGEST_ENTITY), cut)
        if amp > 0 and escaped.find(";", amp, cut) == -1:
            cut = amp  # the entity would straddle the cut
        pieces.append(escaped[:cut])
        escaped = escaped[cut:]
    pieces.append(escaped)
    return pieces
