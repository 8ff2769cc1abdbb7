"""Matrix message content: a plain ``body`` and an HTML ``formatted_body``, split under the
server's event size limit.

Synapse refuses an event over 65,536 bytes (the whole signed event, JSON). A part's content is
kept under ``max_bytes`` (default 30,000: room for the event's envelope, the relation and the
server's signatures). Our header is bold; the body (child output, agent answers) is escaped
with ``html.escape`` so it can neither break the markup nor forge a header of ours. Splitting
works on lines; a line longer than a part is cut between characters.

Invariant: the plain bodies of the parts, header lines removed, carry every character of the
body in order (a cut line continues on the next line); every part's content JSON fits in
``max_bytes``.
"""
from __future__ import annotations

import html
import json
from typing import Any

FORMAT = "org.matrix.custom.html"
MAX_EVENT_BYTES = 30000


def content_size(content: dict[str, Any]) -> int:
    return len(json.dumps(content, ensure_ascii=False).encode("utf-8"))


def message(lines: list[str], header: str = "", msgtype: str = "m.text") -> dict[str, Any]:
    """The ``m.room.message`` content of one part: ``header`` bold, ``lines`` escaped."""
    escaped = "<br>\n".join(html.escape(line, quote=False) for line in lines)
    formatted = f"<b>{html.escape(header, quote=False)}</b><br>\n{escaped}" if header else escaped
    body = "\n".join([header, *lines] if header else lines)
    return {"msgtype": msgtype, "body": body, "format": FORMAT, "formatted_body": formatted}


def render_parts(body: str, header: str = "", max_bytes: int = MAX_EVENT_BYTES) -> list[dict[str, Any]]:
    """Message contents, each at most ``max_bytes`` of JSON, that together carry the whole body."""
    if max_bytes < 1000:
        raise ValueError(f"max_bytes must be at least 1000, got {max_bytes}")
    header = header[:200]
    parts: list[list[str]] = [[]]
    for line in (body if body.strip() else "(empty)").split("\n"):
        for piece in _pieces(line, max_bytes // 3):  # escaped twice (body and HTML): a third each
            if parts[-1] and content_size(message([*parts[-1], piece], header)) > max_bytes:
                parts.append([])
            parts[-1].append(piece)
    return [message(lines, header) for lines in parts]


def _pieces(line: str, budget: int) -> list[str]:
    """``line`` in chunks whose escaped JSON and HTML forms stay within ``budget`` bytes each."""
    pieces = []
    while _cost(line) > budget:
        cut = max(1, len(line) * budget // _cost(line))
        while cut > 1 and _cost(line[:cut]) > budget:
            cut = cut * 9 // 10
        pieces.append(line[:cut])
        line = line[cut:]
    pieces.append(line)
    return pieces


def _cost(text: str) -> int:
    escaped = html.escape(text, quote=False)
    return max(len(json.dumps(text, ensure_ascii=False).encode()), len(json.dumps(escaped, ensure_ascii=False).encode()))
