"""Ledger rows as plain data with stable keys: what ``offload agents`` / ``inbox`` print, and
exactly what their ``--json`` emits (documented in the README, so scripts can rely on it).

Pure: a row and ``now`` in, a dict out; the owner's liveness is the only probe of the world.
Keys (never renamed; new keys may be added): ``id``, ``session``, ``label``, ``state``,
``dispatched_at``, ``completed_at`` (epoch seconds or null), ``delivery_state``,
``delivery_attempts``, ``owner_pid``, ``owner`` (``running`` | ``exited`` | null), and
``children``: one ``{"task", "goal", "status", "duration_seconds"}`` per task, ``task``
counting from 1, ``status`` ``running`` until that child has finished.
"""
from __future__ import annotations

from typing import Any

from delegation.ledger import LedgerRow
from delegation.liveness import owner_alive


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
        status = str(entry.get("status") or "unknown") if entry else ("running" if row.state == "running" else "unknown")
        out.append({"task": index + 1, "goal": str(goals[index] if index < len(goals) else ""), "status": status,
                    "duration_seconds": _number(entry.get("duration_seconds")) if entry else None})
    return out


def owner_state(row: LedgerRow) -> str | None:
    if not row.owner_pid:
        return None
    return "running" if owner_alive(row.owner_pid, row.owner_started_at) else "exited"


def label(row: LedgerRow) -> str:
    task, event = row.task or {}, row.event or {}
    if task.get("group"):
        return f"group {task['group']}"
    return str(task.get("goal") or event.get("goal") or "")


def record(row: LedgerRow) -> dict[str, Any]:
    return {"id": row.delegation_id, "session": row.parent_session_id or row.origin_session or None,
            "label": label(row), "state": row.state, "dispatched_at": row.dispatched_at,
            "completed_at": row.completed_at, "delivery_state": row.delivery_state,
            "delivery_attempts": row.delivery_attempts, "owner_pid": row.owner_pid, "owner": owner_state(row),
            "children": children(row)}
