"""Completion events and synthetic results, built from a record snapshot. Pure functions.

An event is the one thing that leaves the engine: it goes on ``completion_queue`` and into
the ledger's ``event_json``, and a renderer turns it into the parent's next turn. So it must
be self-contained (the task source travels with the result) and JSON-serializable. Its
``origin`` is the unit's whole ``Origin`` (JSON); the flat session fields beside it are what a
previous version and the hermes surface read.

An interim event (``task_failure_notice``: one child of a still-running unit failed) is an
early warning, not the result: it is never persisted, claimed, acknowledged or deduplicated
against the unit's row, and the unit's final event still follows. ``is_interim`` is the one
test every consumer uses to tell the two apart.
"""
from __future__ import annotations

import re
from typing import Any, TypedDict

from offload.engine.states import COMPLETED, ERROR, STOP_STALL
from offload.origin import IDENTITY_KEYS, Origin


class ChildResult(TypedDict, total=False):
    """One child's entry in a batch event's ``results`` (its ``status`` is a child state of
    ``offload.engine.states``)."""

    task_index: int
    status: str
    summary: str | None
    error: str | None
    api_calls: int
    duration_seconds: float | None
    model: str | None
    exit_reason: str
    truncated: bool
    finish_reason: str
    error_kind: str
    tool_trace: list[dict[str, Any]]  # its tool calls in order: {"tool", "args", "outcome", "seconds"}
    tool_trace_dropped: int  # earlier tool calls not kept in the trace


class CompletionEvent(TypedDict, total=False):
    """The wire form of a unit's event (JSON; stored as the row's ``event_json``). The keys a
    single unit or a batch unit adds are marked; every other key may be absent in an event of
    a previous version, and a reader ignores keys it does not know."""

    type: str  # always "async_delegation"
    delegation_id: str
    status: str  # the unit's status word when it finished (or "running" for an interim event)
    stop_reason: str | None  # why it stopped early: "stall" | "user" (states.STOP_REASONS); null otherwise
    origin: dict[str, str]  # the whole Origin (Origin.to_json); the flat fields below repeat it
    session_key: str
    origin_ui_session_id: str
    origin_session_id: str
    parent_session_id: str | None
    goal: str
    context: str | None
    toolsets: list[str] | None
    role: str
    dispatched_at: float
    completed_at: float | None
    model: str | None
    error: str | None
    # a single unit
    summary: str | None
    api_calls: int
    duration_seconds: float | None
    # a batch unit
    is_batch: bool
    goals: list[Any]
    results: list[ChildResult]
    total_duration_seconds: float | None
    task_indexes: list[int]
    group: str
    task_failure_notice: bool  # an interim event: see ``is_interim``


STALL_META_KEYS = ("stalled_after_quiet_seconds", "stall_threshold_seconds", "stall_phase", "stall_grace_seconds")
_COMMON = ("delegation_id", "session_key", "origin_ui_session_id", "origin_session_id", "parent_session_id",
           "goal", "context", "toolsets", "role", "dispatched_at", "completed_at")


def is_interim(evt: CompletionEvent | dict[str, Any]) -> bool:
    """True for an early-warning event that is not the unit's result (see the module docstring)."""
    return bool(evt.get("task_failure_notice"))


def failure_notice(snapshot: dict[str, Any], entry: dict[str, Any]) -> CompletionEvent:
    """The interim event for one failed child of the running batch unit ``snapshot``."""
    evt = build_event(snapshot, {"results": [entry]}, "running")
    evt.update(task_failure_notice=True, is_batch=True, n_tasks=len(evt.get("goals") or []) or 1,
               completed_at=None)
    if entry.get("live_transcript"):
        evt["live_transcript"] = entry["live_transcript"]
    return evt


def crash_result(exc: BaseException, *, is_batch: bool, elapsed_s: float) -> dict[str, Any]:
    error = f"{type(exc).__name__}: {exc}"
    if is_batch:
        return {"results": [], "error": error, "total_duration_seconds": round(elapsed_s, 2)}
    return {"status": ERROR, "summary": None, "error": error, "api_calls": 0, "duration_seconds": round(elapsed_s, 2)}


def event_base(snapshot: dict[str, Any], status: str) -> CompletionEvent:
    """What every event of a unit carries: its identity, origin, task source, times and routing
    (the completion events below and recovery's ``unknown`` event alike)."""
    evt: CompletionEvent = {"type": "async_delegation", **{k: snapshot.get(k) for k in _COMMON}, "status": status}
    evt["session_key"] = evt["session_key"] or ""
    evt["origin_ui_session_id"] = evt["origin_ui_session_id"] or ""
    evt["origin_session_id"] = evt["origin_session_id"] or ""
    evt["origin"] = Origin.of_event(snapshot).to_json()
    for key in (*IDENTITY_KEYS, "subagent_config"):
        if snapshot.get(key):
            evt[key] = snapshot[key]
    return evt


def build_event(snapshot: dict[str, Any], result: dict[str, Any], status: str) -> CompletionEvent:
    evt = event_base(snapshot, status)
    for key in STALL_META_KEYS:
        if key in result:
            evt[key] = result[key]
    reason = snapshot.get("_stop_reason") if status != COMPLETED else None
    evt["stop_reason"] = reason
    if reason == STOP_STALL:  # a child that honoured the monitor's interrupt: say what the monitor saw
        evt.setdefault("stalled_after_quiet_seconds", snapshot.get("_stall_quiet_seconds"))
        evt.setdefault("stall_threshold_seconds", snapshot.get("_stall_threshold_seconds"))
        evt.setdefault("stall_phase", "in_tool" if snapshot.get("_stall_in_tool") else "idle")
    if snapshot.get("is_batch"):
        _add_batch_fields(evt, snapshot, result)
    else:
        _add_single_fields(evt, snapshot, result)
    return evt


def _add_single_fields(evt: dict[str, Any], snapshot: dict[str, Any], result: dict[str, Any]) -> None:
    evt["model"] = result.get("model") or snapshot.get("model")
    evt["summary"] = result.get("summary")
    evt["error"] = result.get("error")
    evt["api_calls"] = result.get("api_calls") or 0
    duration = result.get("duration_seconds")
    if duration is None and snapshot.get("completed_at") and snapshot.get("dispatched_at"):
        duration = round(snapshot["completed_at"] - snapshot["dispatched_at"], 2)
    evt["duration_seconds"] = duration
    for key in ("exit_reason", "truncated", "finish_reason", "error_kind"):
        if key in result:
            evt[key] = result[key]


def _add_batch_fields(evt: dict[str, Any], snapshot: dict[str, Any], result: dict[str, Any]) -> None:
    evt["is_batch"] = True
    evt["goals"] = snapshot.get("goals") or []
    evt["model"] = snapshot.get("model")
    evt["results"] = list(result.get("results") or [])
    evt["error"] = result.get("error")
    evt["total_duration_seconds"] = result.get("total_duration_seconds")
    for key in ("group", "live_transcripts", "task_indexes"):
        if result.get(key) is not None or snapshot.get(key) is not None:
            evt[key] = result.get(key, snapshot.get(key))


def stall_message(goal: str | None, quiet_s: float) -> str:
    label = re.sub(r"\s+", " ", goal or "").strip()[:120]
    after = f" after {round(quiet_s / 60)} min of no progress" if quiet_s >= 60 else ""
    return (f'Background task "{label}" stopped responding{after} and was cancelled. '
            "Nothing else was affected; ask me to run it again if you still need it.")


def stalled_result(snapshot: dict[str, Any], *, grace_s: float, now: float) -> dict[str, Any]:
    """The synthetic result of a unit the monitor force-finalized.

    Children of a batch unit that had already finished keep their real results; the rest
    are reported ``stalled``.
    """
    quiet = float(snapshot.get("_stall_quiet_seconds") or 0.0)
    meta = {
        "stalled_after_quiet_seconds": quiet,
        "stall_threshold_seconds": snapshot.get("_stall_threshold_seconds"),
        "stall_phase": "in_tool" if snapshot.get("_stall_in_tool") else "idle",
        "stall_grace_seconds": grace_s,
    }
    elapsed = round(now - (snapshot.get("dispatched_at") or now), 2)
    error = stall_message(snapshot.get("goal"), quiet)
    if not snapshot.get("is_batch"):
        return {"status": "stalled", "exit_reason": "stalled", "summary": None, "api_calls": 0,
                "duration_seconds": elapsed, "error": error, **meta}
    finished = {r.get("task_index"): r for r in snapshot.get("_partial_results") or []}
    indexes = unit_task_indexes(snapshot)
    results = [finished.get(i) or {"task_index": i, "status": "stalled", "summary": None, "error": error}
               for i in indexes] if finished else []
    return {"results": results, "error": error, "total_duration_seconds": elapsed, **meta}


def unit_task_indexes(record: dict[str, Any]) -> list[int]:
    indexes = record.get("task_indexes")
    if indexes:
        return list(indexes)
    return list(range(len(record.get("goals") or []) or 1))
