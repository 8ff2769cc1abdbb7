"""The live roster, as pure views of record snapshots: what ``/agents`` shows of a unit
(no callables, no private keys; for active units, seconds since progress and each child's
activity sampled from its ``progress_fn``), and which records a session selects.

Samplers and interrupt callbacks are extension points: they are called outside the engine
lock and defensively, so a slow or raising one blocks and breaks nothing.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from delegation.events import unit_task_indexes
from delegation.log import logger
from delegation.observers import notify
from delegation.states import ACTIVE_STATES

_CALLABLE_KEYS = frozenset({"interrupt_fn", "progress_fn"})  # public names, never listed


def task_count(records: Iterable[dict[str, Any]]) -> int:
    """Child subagents in running or finalizing units."""
    units = [r for r in records if r.get("status") in ("running", "finalizing")]
    return sum(len(unit_task_indexes(r)) if r.get("is_batch") else 1 for r in units)


def session_selected(record: dict[str, Any], session_key: str, ui: str, parent: str) -> bool:
    return bool((session_key and record.get("session_key") == session_key)
                or (ui and record.get("origin_ui_session_id") == ui)
                or (parent and record.get("parent_session_id") == parent))


def public_view(record: dict[str, Any], progress_fn: Callable[[], Any] | None, now_mono: float) -> dict[str, Any]:
    item = {k: v for k, v in record.items() if k[:1] != "_" and k not in _CALLABLE_KEYS}
    if record.get("status") in ACTIVE_STATES:
        item["seconds_since_progress"] = round(now_mono - record.get("_progress_ts", now_mono), 2)
        _add_live_activity(item, progress_fn)
    if record.get("status") in ("stalling", "stalled"):
        item.update(_public_stall_fields(record))
    return item


def _add_live_activity(item: dict[str, Any], progress_fn) -> None:
    if progress_fn is None:
        return
    try:
        token, in_tool = progress_fn()
    except Exception:
        return
    item["in_tool"] = bool(in_tool)
    if isinstance(token, (tuple, list)):
        item["children_activity"] = [_child_activity(entry) for entry in token]


def _child_activity(entry: Any) -> dict[str, Any] | None:
    if not isinstance(entry, (tuple, list)) or len(entry) < 2:
        return None
    activity: dict[str, Any] = {"api_calls": entry[0], "current_tool": entry[1]}
    if len(entry) > 2 and isinstance(entry[2], (int, float)) and not isinstance(entry[2], bool):
        activity["seconds_since_activity"] = round(max(0.0, time.time() - entry[2]), 1)
    return activity


def _public_stall_fields(record: dict[str, Any]) -> dict[str, Any]:
    fields = {"stalled_after_quiet_seconds": record.get("_stall_quiet_seconds"),
              "stall_threshold_seconds": record.get("_stall_threshold_seconds"),
              "stall_in_tool": record.get("_stall_in_tool")}
    return {k: v for k, v in fields.items() if v is not None}


def call_interrupt(delegation_id: str, interrupt_fn: Callable[[], Any] | None, reason: str) -> bool:
    """Call one unit's interrupt callback; True if it was signalled."""
    if interrupt_fn is None:
        return False
    try:
        interrupt_fn()
    except Exception:
        logger.debug("interrupt_fn of %s raised (%s)", delegation_id, reason, exc_info=True)
        return False
    notify("interrupted", delegation_id, reason=reason)
    return True
