"""What the dashboard shows, as plain dicts: the roster, the filtered history and one
delegation's detail. No HTTP and no HTML here.

Sources (of the runtime ``off`` every function is given): the ledger (every process's work on
this home or shared ledger, through ``offload.ledger.queries`` and ``get``); for units this
runtime runs, the engine's live roster
(per-child API calls, current tool, seconds idle, stall clock); for units of other processes
and hosts, the activity snapshot their owner published in the ledger (``offload.owner.activity``),
with its age. Invariants: nothing here writes, and a value that came from a child is
passed through as data (the templates escape it).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from offload.owner import activity
from offload.views import result
from offload.engine.states import (ACTIVE_STATES, LIVE_STATES, QUEUED, RUNNING, UNFINISHED, UNIT_STATES, UNKNOWN,
                                   child_state, unit_state)
from offload.ledger import DelegationLedger, JournalEntry, LedgerError, LedgerRow
from offload.ledger import queries as ledger_queries
from offload.ledger.browse import Browse
from offload.views.rows import owner_state, row_state
from offload.render.resumed import child_resumed, unit_resumed
from offload.render.text import clip_words
from offload.render.truncation import is_truncated

if TYPE_CHECKING:
    from offload.runtime import Offload

logger = logging.getLogger(__name__)
LABEL_GOAL_CHARS = 48  # per goal in a unit's label; the full goals are on the child rows
RECENT_S = 15 * 60.0  # finished units stay on the roster this long, so "completed" is seen
RECENT_ROWS = 200  # at most this many of them, the newest dispatched
STATES = UNIT_STATES  # the history page's state filter offers every unit state
DELIVERY_STATES = ("pending", "delivered", "dropped")


def _owner(row: LedgerRow | None, ledger: DelegationLedger) -> dict[str, Any]:
    """The owner process, and its fate: ``alive``; ``exited`` (after its unit finished, as every
    process that ends normally does); or ``died`` (before its unit finished: recovered as unknown)."""
    if row is None or not row.owner_pid:
        return {"pid": None, "alive": None, "host": None, "fate": None}
    alive = owner_state(row, ledger) == "running"
    fate = "alive" if alive else ("died" if row.state in LIVE_STATES or row.state == UNKNOWN else "exited")
    return {"pid": row.owner_pid, "alive": alive, "host": ledger.owner_host(row), "fate": fate}


def _label(task: dict[str, Any], event: dict[str, Any]) -> str:
    """A unit's one-line name: its group, its one goal, or its goals each cut at a word with "…"
    (the engine's own label cuts each goal at 40 characters, mid-word)."""
    if task.get("group"):
        return f"group {task['group']}"
    goals = [goal for _, goal in _child_goals(task)] if task.get("is_batch") else []
    if len(goals) > 1:
        return f"{len(goals)} subagents: " + "; ".join(clip_words(goal, LABEL_GOAL_CHARS) for goal in goals)
    return " ".join(str(task.get("goal") or event.get("goal") or "").split())


def _child_goals(task: dict[str, Any]) -> list[tuple[int, str]]:
    goals = list(task.get("goals") or [])
    if not task.get("is_batch"):
        return [(0, str(task.get("goal") or ""))]
    indexes = task.get("task_indexes") or list(range(len(goals)))
    return [(i, str(goals[i]) if 0 <= i < len(goals) else "") for i in indexes]


def _children(task: dict[str, Any], result: dict[str, Any], live: dict[str, Any] | None,
              unit_live: str | None) -> list[dict[str, Any]]:
    """One dict per child: goal, state and summary once finished, live activity while running;
    ``unit_live``: the state of a child not reported yet (``running``, or ``queued`` while its
    unit waits to start), None once the unit finished (such a child is ``unknown``)."""
    finished = {r.get("task_index"): r for r in (result.get("results") or []) if isinstance(r, dict)}
    activity = list((live or {}).get("children_activity") or [])
    children = []
    for position, (index, goal) in enumerate(_child_goals(task)):
        entry = finished.get(index) or ({} if task.get("is_batch") else _single_result(result))
        status = child_state(entry.get("status")) if entry else (unit_live or UNKNOWN)
        child = {"index": index, "number": index + 1, "goal": goal, "status": status,
                 "summary": entry.get("summary"), "error": entry.get("error"), "api_calls": entry.get("api_calls"),
                 "duration_s": entry.get("duration_seconds"), "current_tool": None, "idle_s": None,
                 "last_text": None, "last_tool": None, "tool_trace": entry.get("tool_trace"),
                 "truncated": bool(entry) and is_truncated(entry),  # completed, but cut off: no new state
                 "resumed": child_resumed(entry.get("resumed")) if entry else None}  # after its owner died
        if position < len(activity) and isinstance(activity[position], dict) and not entry:
            act = activity[position]
            child.update(api_calls=act.get("api_calls"), current_tool=act.get("current_tool"),
                         idle_s=act.get("seconds_since_activity"), last_text=act.get("last_text"),
                         last_tool=act.get("last_tool"))
        children.append(child)
    return children


def _single_result(result: dict[str, Any]) -> dict[str, Any]:
    return result if result.get("status") else {}


def _unit(ledger: DelegationLedger, row: LedgerRow | None, live: dict[str, Any] | None, now: float,
          remote: dict[str, Any] | None = None) -> dict[str, Any]:
    """A roster/history entry from a ledger row, a live record, or both (live wins for status);
    ``remote``: the activity another process published for a running row (``activity.live_view``)."""
    task = dict(row.task or {}) if row else {k: live.get(k) for k in
                                             ("goal", "goals", "is_batch", "task_indexes", "group")}
    event = (row.event if row else None) or {}
    result = (row.result if row else None) or {}
    dispatched_at = row.dispatched_at if row else live.get("dispatched_at")
    status = unit_state((live or {}).get("status")) if live else (row_state(row) if row else RUNNING)
    if remote and status == RUNNING:
        status = unit_state(remote.get("status") or status)  # e.g. "stalling", seen by its owner
    children = _children(task, result, live or remote,
                         (QUEUED if status == QUEUED else RUNNING) if status in UNFINISHED else None)
    return {
        "id": row.delegation_id if row else live["delegation_id"], "status": status, "label": _label(task, event),
        "session": (row.parent_session_id or row.origin_session) if row else
                   (live.get("parent_session_id") or live.get("session_key")),
        "owner": _owner(row, ledger), "local": live is not None and status in ACTIVE_STATES,
        "dispatched_at": dispatched_at,
        "age_s": round(max(0.0, now - dispatched_at), 1) if dispatched_at else None,
        "completed_at": row.completed_at if row else live.get("completed_at"),
        "stall_clock_s": (live or remote or {}).get("seconds_since_progress"),
        "activity_age_s": remote.get("snapshot_age_s") if remote and not live else None,
        "delivery_state": row.delivery_state if row else "in memory",
        "delivery_attempts": row.delivery_attempts if row else 0,
        "drop_reason": row.drop_reason if row else None,
        "children": children, "truncated": sum(1 for child in children if child["truncated"]),
        "resumed": unit_resumed(task, [child["resumed"] for child in children]),
    }


def roster(off: Offload, now: float | None = None, recent_s: float = RECENT_S) -> list[dict[str, Any]]:
    """Queued and running units of every process, plus units finished in the last ``recent_s``;
    newest first."""
    now = time.time() if now is None else now
    ledger = off.ledger()
    live = {item["delegation_id"]: item for item in off.engine.list()}
    rows = {row.delegation_id: row
            for row in [*ledger_queries.queued_rows(ledger), *ledger_queries.running_rows(ledger)]}
    found = ledger_queries.existing_ledger(ledger)
    # an index range on completed_at, not a sort of every settled row (the roster re-reads each second)
    for row in found.browse(Browse(finished_since=now - recent_s, limit=RECENT_ROWS)) if found else []:
        rows.setdefault(row.delegation_id, row)
    remote = activity.remote_views(ledger, [did for did, row in rows.items()
                                            if row.state == "running" and did not in live], now)
    units = [_unit(ledger, row, live.get(did), now, remote.get(did)) for did, row in rows.items()]
    # Units of this process whose ledger row is missing (the write failed) still show.
    units += [_unit(ledger, None, item, now) for did, item in live.items() if did not in rows
              and (item.get("status") in LIVE_STATES
                   or (item.get("completed_at") or 0) >= now - recent_s)]
    return sorted(units, key=lambda u: u["dispatched_at"] or 0.0, reverse=True)


def history_unit(ledger: DelegationLedger, row: LedgerRow, now: float) -> dict[str, Any]:
    """A history table row: the roster's entry of a ledger row (no live activity)."""
    return _unit(ledger, row, None, now)


def documents(off: Offload, rows: list[LedgerRow]) -> list[dict[str, Any]]:
    """The JSON API's list: the result document (``offload.views.result``) of each row."""
    return [result.from_row(row, off.render).to_json() for row in rows]


def document(off: Offload, delegation_id: str) -> dict[str, Any] | None:
    """One delegation's result document, or None if the ledger does not know it."""
    found = ledger_queries.existing_ledger(off.ledger())
    row = found.get(delegation_id) if found else None
    return None if row is None else result.from_row(row, off.render).to_json()


def detail(off: Offload, delegation_id: str, now: float | None = None) -> dict[str, Any] | None:
    """Everything about one delegation: the task, per-child results, the text the agent read,
    delivery attempts and the owner; None if the ledger and this process do not know it."""
    now = time.time() if now is None else now
    ledger = off.ledger()
    found = ledger_queries.existing_ledger(ledger)
    row = found.get(delegation_id) if found else None
    live = next((i for i in off.engine.list() if i["delegation_id"] == delegation_id), None)
    if row is None and live is None:
        return None
    remote = activity.remote_views(ledger, [delegation_id]) if row and row.state == "running" and not live else {}
    unit = _unit(ledger, row, live, now, remote.get(delegation_id))
    event = (row.event if row else None) or {}
    unit.update(task=(row.task if row else None) or {}, event=event,
                agent_text=off.render(event) if event else None,
                delivered_at=row.delivered_at if row else None,
                claimed_at=row.delivery_claimed_at if row else None,
                claimed=bool(row and row.delivery_claim),
                journal=journal(off, delegation_id) if found or live else [])
    return unit


def journal(off: Offload, delegation_id: str) -> list[JournalEntry]:
    """The unit's journal: what the ledger has, then what this runtime has not written yet."""
    unwritten = off.owner_loop.journal.unwritten(delegation_id)
    found = ledger_queries.existing_ledger(off.ledger())
    try:
        stored = found.read_journal(delegation_id) if found else []
    except LedgerError as exc:  # the journal is decoration: the page still shows the row
        logger.debug("reading the journal of %s failed: %s", delegation_id, exc)
        stored = []
    seen = {(e.at, e.kind, e.child) for e in stored}
    return [*stored, *(e for e in unwritten if (e.at, e.kind, e.child) not in seen)]
