"""What the trace says of a unit whose owner process died, read from what the owner left in the
ledger: when it was last seen alive (the recovered unit span ends then, not when recovery ran,
which may be hours later) and which children it finished (a ``child finished`` event each).

Invariant: pure reads; a ledger that cannot answer leaves the row's own times, never an error.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

logger = logging.getLogger("offload.telemetry")

# Journal entries another process may write for a unit (a person answering its approval request).
_NOT_THE_OWNERS = ("approval",)


def last_seen_s(row: Any, ledger: Callable[[], Any] | None) -> float:
    """The last time the owner is known alive: the newest of its row's writes (dispatch, each
    finished child), its journal (each child message and tool call, written every ~2 s) and its
    activity snapshot, never after now."""
    seen = [row.dispatched_at or 0.0, row.updated_at or 0.0]
    try:
        store = ledger() if ledger is not None else None
        if store is not None:
            seen += [e.at for e in store.read_journal(row.delegation_id) if not e.kind.startswith(_NOT_THE_OWNERS)]
            for written_at, snapshot in store.read_activity([row.delegation_id]).values():
                seen += [written_at, *_activity_times(snapshot)]
    except Exception:  # an old ledger without the side tables, a server that is down
        logger.debug("reading the last signs of life of %s failed", row.delegation_id, exc_info=True)
    return min(time.time(), max(t for t in seen if isinstance(t, (int, float))))


def _activity_times(snapshot: dict[str, Any]) -> list[float]:
    children = [c.get("last_activity_at") for c in snapshot.get("children") or [] if isinstance(c, dict)]
    return [t for t in (snapshot.get("progress_at"), *children) if isinstance(t, (int, float))]


def finished_children(row: Any, start_ns: int, end_ns: int) -> list[tuple[dict[str, Any], int]]:
    """``(attributes, time_ns)`` of a ``child finished`` event per child result the row holds,
    at the unit's start plus the child's run time (within the span)."""
    events = []
    for entry in (row.result or {}).get("results") or []:
        if not isinstance(entry, dict):
            continue
        took_s = entry.get("duration_seconds")
        at_ns = start_ns + int(took_s * 1e9) if isinstance(took_s, (int, float)) else end_ns
        events.append(({"offload.task_index": entry.get("task_index", -1), "offload.status": str(entry.get("status"))},
                       max(start_ns, min(end_ns, at_ns))))
    return events
