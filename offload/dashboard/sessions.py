"""One session's page as plain data: its delegations (newest first, through the ledger's
browse), where each result goes (``offload.origin``: a gateway chat, an MCP client's
namespace, or the session of ``offload chat``/``run`` or a Python program) and how far its
delivery got, and every delegation on one shared time axis (``timeline.geometry``).

Invariant: the destination is read from the row's captured ``Origin``, never re-derived from
text; nothing here writes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offload.dashboard import model, timeline
from offload.engine.states import UNFINISHED
from offload.ledger import LedgerRow
from offload.ledger import queries as ledger_queries
from offload.ledger.browse import Browse
from offload.origin import Origin
from offload.render.state_style import tone

if TYPE_CHECKING:
    from offload.runtime import Offload

SESSION_ROWS = 200  # the page shows a session's newest delegations; the history pages the rest
MCP_PREFIX = "mcp:"  # offload.mcp_server's session keys


def destination(origin: Origin) -> str:
    """Where a result of ``origin`` is delivered, in words."""
    chat = origin.chat()
    if chat:
        where = f"{chat['platform']} {chat['chat_type']} chat {chat['chat_id']}"
        return where + (f", thread {chat['thread_id']}" if chat.get("thread_id") else "") + " (gateway)"
    if origin.session_key.startswith(MCP_PREFIX):
        return f"MCP client, namespace {origin.session_key[len(MCP_PREFIX):]}"
    if origin.ui_session_id:
        return f"desktop UI session {origin.ui_session_id}"
    return "its session in offload chat, offload run or a Python program"


def delivery_words(unit: dict[str, Any]) -> str:
    if unit["status"] in UNFINISHED:
        return "not finished yet"
    if unit["delivery_state"] == "delivered":
        return f"delivered after {unit['delivery_attempts']} attempt(s)"
    if unit["delivery_state"] == "dropped":
        return f"dropped: {unit['drop_reason'] or 'no reason recorded'}"
    return "awaiting delivery" + (" (a consumer holds it now)" if unit.get("claimed") else "")


def _entry(ledger: Any, row: LedgerRow, now: float) -> dict[str, Any]:
    unit = model.history_unit(ledger, row, now)
    unit.update(destination=destination(Origin.of_row(row)), delivered_at=row.delivered_at,
                claimed=bool(row.delivery_claim))
    unit["went"] = delivery_words(unit)
    return unit


def _lane(unit: dict[str, Any], now: float) -> dict[str, Any]:
    running = unit["status"] in UNFINISHED
    marks = [] if running else [{"at": unit["completed_at"], "kind": "finish", "label": f"finished: {unit['status']}"}]
    if unit.get("delivered_at") and unit["delivery_state"] in ("delivered", "dropped"):
        marks.append({"at": unit["delivered_at"], "kind": unit["delivery_state"], "label": unit["delivery_state"]})
    return {"label": f"{unit['id'][-8:]} {unit['label']}", "tone": tone(unit["status"]), "word": unit["status"],
            "start": unit["dispatched_at"], "end": now if running else unit["completed_at"], "open": running,
            "marks": marks}


def session_page(off: Offload, session: str, now: float) -> dict[str, Any]:
    """The session's delegations, oldest lane first on the shared axis, newest first in the table."""
    ledger = off.ledger()
    found = ledger_queries.existing_ledger(ledger)
    rows = found.browse(Browse(session=session, limit=SESSION_ROWS + 1)) if found else []
    units = [_entry(ledger, row, now) for row in rows[:SESSION_ROWS]]
    lanes = [_lane(u, now) for u in reversed(units)]
    times = [t for lane in lanes for t in (lane["start"], lane["end"], *(m["at"] for m in lane["marks"]))]
    drawn = {"t0": min(times, default=now), "t_end": max(times, default=now), "lanes": lanes}
    return {"session": session, "units": units, "more": len(rows) > SESSION_ROWS,
            "destinations": sorted({u["destination"] for u in units}),
            "timelines": [timeline.geometry(drawn, layout) for layout in (timeline.WIDE, timeline.NARROW)]}
