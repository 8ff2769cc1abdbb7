"""Ledger rows as plain data with stable keys: what ``offload agents`` / ``inbox`` print, and
exactly what their ``--json`` emits (documented in the README, so scripts can rely on it).

Pure: a row and ``now`` in, a dict out; the owner's liveness is the only probe of the world.
Keys (never renamed; new keys may be added): ``id``, ``session``, ``label``, ``state``,
``dispatched_at``, ``completed_at`` (epoch seconds or null), ``delivery_state``,
``delivery_attempts``, ``drop_reason`` (why a dropped result was dropped, else null),
``claimed_by`` (``{"consumer", "pid", "host", "since"}`` of the consumer delivering a pending
result right now, else null), ``owner_pid``, ``owner`` (``running`` | ``exited`` | null), and
``children``: one ``{"task", "goal", "state", "duration_s", "truncated", "resumed"}`` per task
(the keys of the result document, ``offload.result/1``), ``task`` counting from 1, ``state``
``running`` until that child has finished (``queued`` while its unit waits to start), ``truncated`` true for a
child that stopped unfinished (its answer cut off, or its iteration budget used up:
``offload.render.truncation.is_truncated``); ``resumed`` (the unit's and each child's, as in the
result document: ``offload.render.resumed``) says a new owner continued it after its owner
died. ``state`` is a unit state and each child's ``state`` a child state of
``offload.engine.states`` (``row_state``: also for a row an older version wrote). ``stop_reason`` / ``stall_quiet_s``: why a finished unit stopped early and, for
a stall, after how long without progress (the result document's keys). ``owner_host``: the
owner's host on a shared ledger, else null. ``activity_age_s`` (how old the snapshot is) and
``stall_clock_s``, and on each child of a running row ``api_calls``, ``current_tool``,
``seconds_since_activity``, ``last_text`` (the last line it wrote) and ``last_tool`` (its last
finished tool call, e.g. ``read_file ok 0.2 s``): what the owner published (``offload.owner.activity``) while the unit
and that child run, else null.
"""
from __future__ import annotations

from typing import Any

from offload.ledger import DelegationLedger, LedgerRow
from offload.engine.liveness import owner_alive
from offload.render.resumed import child_resumed, unit_resumed
from offload.render.truncation import is_truncated
from offload.engine.states import QUEUED, RUNNING, UNFINISHED, UNKNOWN, child_state, event_state, stop_reason, unit_state


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _goals_and_indexes(row: LedgerRow) -> tuple[list[Any], list[int]]:
    task, event = row.task or {}, row.event or {}
    goals = task.get("goals") or event.get("goals") or [task.get("goal") or event.get("goal") or ""]
    indexes = task.get("task_indexes") or event.get("task_indexes") or list(range(len(goals)))
    return list(goals), [i for i in indexes if isinstance(i, int)]


def _finished_children(row: LedgerRow) -> dict[int, dict[str, Any]]:
    event = row.event or {}
    entries = (event.get("results") or (row.result or {}).get("results")
               or ([event] if event.get("status") else []))
    by_index: dict[int, dict[str, Any]] = {}
    for position, entry in enumerate(e for e in entries if isinstance(e, dict)):
        index = entry.get("task_index")
        by_index[index if isinstance(index, int) else position] = entry
    return by_index


def children(row: LedgerRow) -> list[dict[str, Any]]:
    goals, indexes = _goals_and_indexes(row)
    finished = _finished_children(row)
    if len(indexes) == 1 and len(finished) == 1 and indexes[0] not in finished:
        finished = {indexes[0]: next(iter(finished.values()))}  # a single-task event carries no index
    out = []
    for index in indexes:
        entry = finished.get(index)
        status = child_state(entry.get("status")) if entry else (
            (QUEUED if row.state == QUEUED else RUNNING) if row.state in UNFINISHED else UNKNOWN)
        out.append({"task": index + 1, "goal": str(goals[index] if index < len(goals) else ""), "state": status,
                    "duration_s": _number(entry.get("duration_seconds")) if entry else None})
        out[-1]["truncated"] = bool(entry) and is_truncated(entry)  # the flag `offload run` reads; no new state
        out[-1]["resumed"] = child_resumed(entry.get("resumed")) if entry else None
    return out


def row_state(row: LedgerRow) -> str:
    """The unit state of a ledger row: its children decide once it finished (``event_state``),
    so a row an older version stored as ``completed`` or ``error`` reads in today's words."""
    if row.state in UNFINISHED or not isinstance(row.event, dict):
        return unit_state(row.state)
    return event_state({**row.event, "status": row.state})


def owner_state(row: LedgerRow, ledger: DelegationLedger | None) -> str | None:
    """``running`` | ``exited``, as ``ledger`` judges (the pid check for an owner on this host,
    the lease for another host's); None without an owner or a ledger to ask."""
    if not row.owner_pid or ledger is None:
        return None
    return "exited" if ledger.is_abandoned(row, owner_alive) else "running"


def owner_host(row: LedgerRow) -> str | None:
    return (row.extra or {}).get("owner_host")


def claimed_by(row: LedgerRow) -> dict[str, Any] | None:
    """Who holds the delivery claim of a pending row (the consumer delivering it now), else None."""
    if row.delivery_state != "pending" or not row.delivery_claim:
        return None
    return {"consumer": row.delivery_claim.split(":", 1)[0], "pid": row.delivery_claim_pid,
            "host": (row.extra or {}).get("claim_host"), "since": row.delivery_claimed_at}


def label(row: LedgerRow) -> str:
    task, event = row.task or {}, row.event or {}
    if task.get("group"):
        return f"group {task['group']}"
    return str(task.get("goal") or event.get("goal") or "")


def record(row: LedgerRow, live: dict[str, Any] | None = None, ledger: DelegationLedger | None = None) -> dict[str, Any]:
    """``live``: the owner's published activity for this row (``offload.owner.activity.live_view``);
    ``ledger``: the one the row was read from (it judges whether the owner is alive)."""
    live = live if row.state == "running" else None
    kids = children(row)
    return {"id": row.delegation_id, "session": row.parent_session_id or row.origin_session or None,
            "label": label(row), "state": row_state(row), "dispatched_at": row.dispatched_at,
            "completed_at": row.completed_at, "delivery_state": row.delivery_state,
            "delivery_attempts": row.delivery_attempts, "drop_reason": row.drop_reason, "claimed_by": claimed_by(row),
            "owner_pid": row.owner_pid, "owner": owner_state(row, ledger),
            "owner_host": owner_host(row),
            "activity_age_s": (live or {}).get("snapshot_age_s"), "stall_clock_s": (live or {}).get("seconds_since_progress"),
            "stop_reason": stop_reason(row.event) if row.state not in UNFINISHED else None,
            "stall_quiet_s": (row.event or {}).get("stalled_after_quiet_seconds") if row.state not in UNFINISHED else None,
            "resumed": unit_resumed(row.task, [kid["resumed"] for kid in kids]),
            "children": (_with_activity(kids, (live or {}).get("children_activity") or [])
                         if row.state == "running" else kids)}


def _with_activity(kids: list[dict[str, Any]], activity: list[Any]) -> list[dict[str, Any]]:
    """Each child's published activity (by position, as the engine lists it) while it runs."""
    for position, child in enumerate(kids):
        act = activity[position] if position < len(activity) and isinstance(activity[position], dict) else {}
        act = act if child["state"] == "running" else {}
        child.update(api_calls=act.get("api_calls"), current_tool=act.get("current_tool"),
                     seconds_since_activity=act.get("seconds_since_activity"), last_text=act.get("last_text"),
                     last_tool=act.get("last_tool"))
    return kids
