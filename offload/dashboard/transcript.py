"""What each child of a delegation said, from the journal (``offload.owner.journal``), as items for
the delegation page: its prompt, its messages, each tool call by name with its arguments and
the result it got, in the order they happened.

Invariants: every text stays data (the template escapes it: markup in a child's words, a
tool's arguments or its output is shown as text); a long text is cut to a preview at
``PREVIEW_CHARS`` with the whole behind an expander (what the journal kept: it clips each
text at ``offload.owner.journal.MAX_TEXT_CHARS``); each item has a stable DOM id, so the live page
keeps an open expander open when it swaps in a newer copy. Pure: no I/O.
"""
from __future__ import annotations

import json
from typing import Any

from offload.dashboard.timeline import offset_label
from offload.ledger import JournalEntry

PREVIEW_CHARS = 600


def _pretty(arguments: str) -> str:
    """Tool arguments as indented JSON when they are JSON (models send them as one line)."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return arguments


def _item(kind: str, text: str, at: float, t0: float, dom_id: str, **extra: Any) -> dict[str, Any]:
    text = text or ""
    preview = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS].rstrip() + "…"
    return {"kind": kind, "text": text, "preview": preview, "cut": len(text) > PREVIEW_CHARS,
            "offset": offset_label(round(max(0.0, at - t0), 1)), "id": dom_id, **extra}


def _items(entries: list[JournalEntry], t0: float, prefix: str) -> list[dict[str, Any]]:
    names: dict[str, str] = {}
    items = []
    for number, entry in enumerate(entries):
        dom_id = f"{prefix}-{number}"
        data = entry.data
        if entry.kind == "tool_result":
            name = names.get(str(data.get("call_id")), "tool")
            items.append(_item("result", data.get("content") or "", entry.at, t0, dom_id, name=name))
            continue
        if entry.kind != "message":
            continue
        role = data.get("role")
        if data.get("content"):
            items.append(_item("prompt" if role == "user" else "say", data["content"], entry.at, t0, dom_id + "t"))
        for position, call in enumerate(data.get("tool_calls") or []):
            names[str(call.get("id"))] = str(call.get("name") or "tool")
            items.append(_item("call", _pretty(call.get("arguments") or ""), entry.at, t0, f"{dom_id}c{position}",
                               name=call.get("name") or "tool"))
    return items


def transcripts(unit: dict[str, Any], entries: list[JournalEntry]) -> list[dict[str, Any]]:
    """Per child of ``unit`` (``model.detail``'s dict): its items, oldest first."""
    t0 = unit["dispatched_at"] or 0.0
    said = []
    for child in unit["children"]:
        mine = [e for e in entries if e.child == child["index"] and e.kind in ("message", "tool_result")]
        said.append({"child": child, "said": _items(mine, t0, f"t{child['index']}")})
    return said
