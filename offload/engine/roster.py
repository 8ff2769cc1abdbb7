"""The live roster, as pure views of record snapshots: what ``/agents`` shows of a unit
(no callables, no private keys; for active units, seconds since progress and each child's
activity sampled from its ``progress_fn``), and which records a session selects.

Samplers and interrupt callbacks are extension points: they are called outside the engine
lock and defensively, so a slow or raising one blocks and breaks nothing.

Listing is linear in the live units (bench case 2): ``snapshot`` copies each record once under
the engine lock, deciding which keys are public once per key layout (records share a few),
and ``Snapshot.finish`` samples outside it. Per record the listing holds only its public dict
(mostly plain values, which the cycle collector leaves untracked) and a list slot for its
sampler. A whole-record copy and a tuple per record are tracked containers: at 1,000 records
they made each listing run collections over its own half-built result and promote it toward
full collections of the heap (8% of its CPU; none at 100 records).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from offload.engine.events import unit_task_indexes
from offload.engine.log import logger
from offload.engine.observers import notify
from offload.engine.states import ACTIVE_STATES

_CALLABLE_KEYS = frozenset({"interrupt_fn", "progress_fn", "transcript_fn"})  # public names, never listed
_LAYOUT_CACHE_MAX = 256  # key layouts seen; records use a few, so the bound only guards odd callers
_public_keys_by_layout: dict[tuple[str, ...], tuple[str, ...]] = {}


def task_count(records: Iterable[dict[str, Any]]) -> int:
    """Child subagents in running or finalizing units."""
    units = [r for r in records if r.get("status") in ("running", "finalizing")]
    return sum(len(unit_task_indexes(r)) if r.get("is_batch") else 1 for r in units)


def session_selected(record: dict[str, Any], session_key: str, ui: str, parent: str) -> bool:
    return bool((session_key and record.get("session_key") == session_key)
                or (ui and record.get("origin_ui_session_id") == ui)
                or (parent and record.get("parent_session_id") == parent))


@dataclass
class Snapshot:
    """A listing copied under the engine lock: one public dict per record (progress age
    included), the sampler of each active one (None otherwise), and the stall fields of the
    few records that have them, by position. ``finish`` completes it outside the lock."""

    items: list[dict[str, Any]]
    samplers: list[Callable[[], Any] | None]
    stall_fields: dict[int, dict[str, Any]]

    def finish(self) -> list[dict[str, Any]]:
        """Sample each active unit's live activity (outside the lock) and add the stall fields."""
        for item, sampler in zip(self.items, self.samplers):
            if sampler is not None:
                _add_live_activity(item, sampler)
        for index, fields in self.stall_fields.items():
            self.items[index].update(fields)
        return self.items


def snapshot(records: Iterable[dict[str, Any]], now_mono: float) -> Snapshot:
    """Copy what the listing shows of ``records``; call it under the engine lock, with
    ``now_mono`` read under it too (so no progress stamp is newer than it)."""
    listing = Snapshot([], [], {})
    items, samplers = listing.items, listing.samplers
    for record in records:
        item = _public_copy(record)
        status = item.get("status")
        sampler = None
        if status in ACTIVE_STATES:
            progress_ts = record.get("_progress_ts")
            item["seconds_since_progress"] = round(now_mono - (now_mono if progress_ts is None else progress_ts), 2)
            sampler = record.get("progress_fn")
        if status in ("stalling", "stalled"):
            listing.stall_fields[len(items)] = _public_stall_fields(record)
        items.append(item)
        samplers.append(sampler)
    return listing


def _public_copy(record: dict[str, Any]) -> dict[str, Any]:
    layout = tuple(record)
    keys = _public_keys_by_layout.get(layout)
    if keys is None:
        keys = tuple(k for k in layout if k[:1] != "_" and k not in _CALLABLE_KEYS)
        if len(_public_keys_by_layout) < _LAYOUT_CACHE_MAX:
            _public_keys_by_layout[layout] = keys
    return {key: record[key] for key in keys}


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
        idle = [a["seconds_since_activity"] for a in item["children_activity"] if a and "seconds_since_activity" in a]
        if idle and item.get("seconds_since_progress") is not None:  # activity since the last sweep counts now
            item["seconds_since_progress"] = min(item["seconds_since_progress"], min(idle))


def _child_activity(entry: Any) -> dict[str, Any] | None:
    if not isinstance(entry, (tuple, list)) or len(entry) < 2:
        return None
    activity: dict[str, Any] = {"api_calls": entry[0], "current_tool": entry[1]}
    if len(entry) > 2 and isinstance(entry[2], (int, float)) and not isinstance(entry[2], bool):
        activity["seconds_since_activity"] = round(max(0.0, time.time() - entry[2]), 1)
    for position, key in ((3, "last_text"), (4, "last_tool")):  # what it last wrote, its last tool call
        if len(entry) > position and isinstance(entry[position], str):
            activity[key] = entry[position]
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
