"""The background-delegation engine: records, capacity, worker pool, dispatch, finalize,
the stall-monitor loop, listing and interrupts; plus the restore/ack facade re-exported from
``async_delegation_delivery``.

Invariants:
- capacity check and record insert happen under one hold of ``_records_lock``; the units of
  one call share one slot (``slot_key``), and ``finalizing`` holds no slot;
- a unit is finalized exactly once: ``running``/``stalling`` → ``finalizing`` → terminal,
  guarded by the record status, so a late runner return after a forced stall is ignored;
- the event is persisted, then queued, then the record turns terminal; a failing durable
  write is logged and never blocks delivery or the slot;
- no lock is held across I/O or a callback: collect under the lock, act outside it.

Module constants are read at call time (tests and operators patch them).
"""
from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
import uuid
from collections import Counter
from typing import Any, Callable

from tools import async_delegation_delivery as _delivery
from tools.async_delegation_delivery import (  # noqa: F401 - re-exported facade
    claim_completion_delivery, claim_event_delivery, complete_completion_delivery, complete_event_delivery,
    defer_completion_delivery, drop_completion_delivery, get_durable_delegation, mark_completion_delivered,
    maybe_sweep_orphaned_completions,
    recover_abandoned_delegations, release_completion_delivery, release_event_delivery,
    restore_undelivered_completions,
)
from tools.async_delegation_events import ROUTING_KEYS, batch_status, build_event, crash_result, stalled_result
from delegation.ledger import DispatchRow, LedgerError  # noqa: F401 - re-exported
from tools.async_delegation_monitor import UNREADABLE, Observation, Thresholds, sweep
from delegation.observers import notify
from tools.async_delegation_pool import DaemonThreadPool
from delegation.ledger.sqlite import initialize_schema as _initialize_schema  # noqa: F401
from delegation.ledger.sqlite import open_connection
from tools.hermes_home import state_db_path
from tools.process_liveness import current_owner
from tools.process_registry import process_registry

logger = logging.getLogger(__name__)

_DEFAULT_MAX_ASYNC_CHILDREN = 3
_MAX_RETAINED_COMPLETED = 50
_STALE_CHECK_INTERVAL = 30.0
_STALE_IDLE_SECONDS = 450.0
_STALE_IN_TOOL_SECONDS = 1200.0
_STALL_GRACE_SECONDS = 120.0
# Delivery policy (read at call time by async_delegation_delivery).
_MAX_DELIVERY_ATTEMPTS = 8
_MAX_COMPLETION_REPLAY_AGE_S = 48 * 3600.0
_CLAIM_LEASE_S = 300.0
_DURABLE_RETENTION_SECONDS = 7 * 24 * 3600.0
_MAX_RETAINED_SETTLED = 1000  # delivered/dropped rows kept in the ledger
_DURABLE_PRUNE_INTERVAL_S = 60.0
_ORPHAN_SWEEP_INTERVAL_S = 30.0
_LIVE_STATES = frozenset({"running", "stalling", "finalizing"})
_ACTIVE_STATES = ("running", "stalling")

_records: dict[str, dict[str, Any]] = {}
_records_lock = threading.Lock()
_active_slots: Counter[str] = Counter()  # slot_key -> number of running/stalling units
_executor: DaemonThreadPool | None = None
_executor_lock = threading.Lock()
_monitor_lock = threading.Lock()
_monitor_thread: threading.Thread | None = None
_monitor_stop = threading.Event()


def _new_delegation_id() -> str:
    # 48 random bits: with 32 (the reference's 8 hex digits) two of 10,000 delegations share an
    # id about once in a hundred runs, and the ledger row of the older one is replaced.
    return "deleg_" + uuid.uuid4().hex[:12]


def _connect():
    """A new connection to the current home's ``state.db`` (schema ready, files 0o600)."""
    return open_connection(state_db_path())


def _get_executor(max_workers: int) -> DaemonThreadPool:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = DaemonThreadPool(max(1, max_workers), thread_name_prefix="async-delegate")
        else:
            _executor.ensure_workers(max_workers)
        return _executor


# -- dispatch -------------------------------------------------------------------------------
def dispatch_async_delegation(*, goal, context, toolsets, role, model, session_key, runner,
                              parent_session_id=None, origin_ui_session_id="", origin_session_id="",
                              interrupt_fn=None, max_async_children=_DEFAULT_MAX_ASYNC_CHILDREN,
                              progress_fn=None, origin: dict | None = None) -> dict[str, Any]:
    """Run ONE subagent in the background; returns ``{"status": "dispatched", "delegation_id"}``
    at once, or ``{"status": "rejected", "error"}``."""
    record = _new_record(_new_delegation_id(), goal, context, toolsets, role, model, session_key,
                         parent_session_id, origin_ui_session_id, origin_session_id, origin)
    return _dispatch(record, runner, max_async_children, interrupt_fn, progress_fn)


def dispatch_async_delegation_batch(*, goals, context, toolsets, role, model, session_key, runner,
                                    parent_session_id=None, origin_ui_session_id="", origin_session_id="",
                                    interrupt_fn=None, max_async_children=_DEFAULT_MAX_ASYNC_CHILDREN,
                                    delegation_id=None, progress_fn=None, slot_key=None, task_indexes=None,
                                    task_transcripts=None, group=None, origin: dict | None = None,
                                    hold_slot: bool = False) -> dict[str, Any]:
    """Run a fan-out unit (a whole call, or one group of it). ``goals`` is the whole call's
    goal list; ``task_indexes`` names the subset this unit runs. ``hold_slot`` keeps the
    unit's slot taken even if the unit finishes at once, until ``release_slot_hold``: the
    caller is still dispatching the other units of the same call, which must not be refused."""
    goals = list(goals or [])
    unit_goals = [goals[i] for i in task_indexes if 0 <= i < len(goals)] if task_indexes else goals
    label = unit_goals[0] if len(unit_goals) == 1 else (
        f"{len(unit_goals)} parallel subagents: " + "; ".join(str(g)[:40] for g in unit_goals))
    record = _new_record(delegation_id or _new_delegation_id(), label, context, toolsets, role, model, session_key,
                         parent_session_id, origin_ui_session_id, origin_session_id, origin)
    record.update(is_batch=True, goals=goals, slot_key=slot_key or record["delegation_id"])
    for key, value in (("task_indexes", task_indexes), ("task_transcripts", task_transcripts), ("group", group)):
        if value:
            record[key] = list(value) if key == "task_indexes" else value
    return _dispatch(record, runner, max_async_children, interrupt_fn, progress_fn, hold_slot)


def _new_record(delegation_id, goal, context, toolsets, role, model, session_key, parent_session_id,
                origin_ui_session_id, origin_session_id, origin) -> dict[str, Any]:
    now = time.time()
    record: dict[str, Any] = {
        "delegation_id": delegation_id, "goal": goal, "context": context, "toolsets": list(toolsets or []) or None,
        "role": role, "model": model, "session_key": session_key or "", "parent_session_id": parent_session_id,
        "origin_ui_session_id": origin_ui_session_id or "", "origin_session_id": origin_session_id or "",
        "status": "running", "dispatched_at": now, "completed_at": None, "is_batch": False,
        "slot_key": delegation_id, "interrupt_fn": None, "progress_fn": None,
        "_progress_token": None, "_progress_ts": time.monotonic(), "_interrupted_at": None, "_started": False,
    }
    for key in ROUTING_KEYS:
        if (origin or {}).get(key):
            record[key] = origin[key]
    return record


def _invalid_dispatch(runner: Any, cap: Any) -> str | None:
    if not callable(runner):
        return f"runner must be a zero-argument callable, got {type(runner).__name__}; pass a function"
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        return f"max_async_children must be an integer of at least 1, got {cap!r}; raise it in the caller"
    return None


def _capacity_error(record: dict[str, Any], cap: int) -> str:
    head = f"Async delegation capacity reached ({cap} running). Wait for one to finish (its result will re-enter the chat)"
    if record["is_batch"]:
        return (f"{head}, run this task synchronously (background=false), or raise "
                "delegation.max_concurrent_children in config.yaml to allow more concurrent background units.")
    return (f"{head}, or run this task synchronously (background=false). Raise delegation.max_concurrent_children "
            "in config.yaml to allow more concurrent background subagents.")


def _dispatch(record, runner, cap, interrupt_fn, progress_fn, hold_slot: bool = False) -> dict[str, Any]:
    invalid = _invalid_dispatch(runner, cap)
    if invalid:
        return {"status": "rejected", "error": invalid}
    record["interrupt_fn"], record["progress_fn"] = interrupt_fn, progress_fn
    did, slot = record["delegation_id"], record["slot_key"]
    with _records_lock:
        if did in _records:
            return {"status": "rejected", "error": f"delegation_id {did!r} is already in use; pass a new id or none"}
        if slot not in _active_slots and len(_active_slots) >= cap:
            return {"status": "rejected", "error": _capacity_error(record, cap)}
        _records[did] = record
        _active_slots[slot] += 2 if hold_slot else 1
        live_units = sum(1 for r in _records.values() if r["status"] in _LIVE_STATES)
    notify("dispatching", did, record=record)
    warning = _persist_dispatch(record)
    # The worker runs in the dispatcher's context (session variables, profile). A Context can
    # be entered by one thread at a time, so the monitor's forced finalize uses a copy.
    context = record["_context"] = contextvars.copy_context()
    try:
        _get_executor(max(cap, live_units)).submit(lambda: context.run(_worker, did, runner))
    except Exception as exc:  # the pool refused (shut down): undo everything
        _abandon_unscheduled(record, holds=2 if hold_slot else 1)
        kind = " batch" if record["is_batch"] else ""
        return {"status": "rejected", "error": f"Failed to schedule async delegation{kind}: {exc}"}
    if progress_fn is not None:
        _ensure_stale_monitor()
    logger.info("Dispatched async delegation %s (session_key=%s): %s", did, record["session_key"] or "<cli>",
                str(record["goal"])[:80])
    handle = {"status": "dispatched", "delegation_id": did}
    notify("dispatched", did, record=record)
    if warning:
        handle["warning"] = warning
    return handle


def _persist_dispatch(record: dict[str, Any]) -> str | None:
    """Write the ``running`` row. On failure the unit still runs, delivered in memory only."""
    ledger = _delivery.current_ledger()
    pid, started = current_owner()
    task = {k: record[k] for k in ("goal", "context", "toolsets", "role", "model", "is_batch")}
    task.update({k: record[k] for k in ("goals", "task_indexes", "task_transcripts", "group", "trace_context",
                                        *ROUTING_KEYS)
                 if record.get(k)})
    task["owner_cwd"] = os.getcwd()
    row = DispatchRow(record["delegation_id"], record["session_key"], record["dispatched_at"], task,
                      record["origin_ui_session_id"], record["origin_session_id"], record["parent_session_id"],
                      pid, started)
    record["_ledger"], record["_ledger_row"] = ledger, row
    try:
        ledger.persist_dispatch(row, time.time())
    except Exception as exc:  # any backend failure: the slot is taken, so the unit must run
        _delivery.report_ledger_error(ledger, "recording a dispatch", exc,
                                      "The unit runs and its result is delivered in memory only.")
        return f"not recorded durably ({exc}); a restart before delivery would lose this result"
    _delivery.note_ledger_ok(ledger)
    return None


def _abandon_unscheduled(record: dict[str, Any], holds: int) -> None:
    with _records_lock:
        if _records.pop(record["delegation_id"], None) is not None:
            for _ in range(holds):
                _release_slot_locked(record["slot_key"])
    try:
        record["_ledger"].forget(record["delegation_id"])
    except Exception as exc:
        _delivery.report_ledger_error(record["_ledger"], "forgetting an unscheduled unit", exc, "")


def release_slot_hold(slot_key: str) -> None:
    """Give back the extra hold a ``hold_slot=True`` dispatch took on ``slot_key``."""
    with _records_lock:
        _release_slot_locked(slot_key)


def _release_slot_locked(slot: str) -> None:
    if slot not in _active_slots:
        return
    _active_slots[slot] -= 1
    if _active_slots[slot] <= 0:
        del _active_slots[slot]


# -- worker and finalize ----------------------------------------------------------------------
def _worker(delegation_id: str, runner: Callable[[], Any]) -> None:
    with _records_lock:
        record = _records.get(delegation_id)
        if record is None:
            return
        record["_started"], record["_progress_ts"] = True, time.monotonic()
        is_batch = record["is_batch"]
    notify("started", delegation_id, record=record)
    started = time.monotonic()
    try:
        result = runner() or {}
        if not isinstance(result, dict):
            raise TypeError(f"runner returned {type(result).__name__}, expected a result dict")
        status = batch_status(result) if is_batch else (result.get("status") or "completed")
    except BaseException as exc:  # the worker never dies with its runner
        logger.exception("Async delegation %s runner crashed", delegation_id)
        result, status = crash_result(exc, is_batch=is_batch, elapsed_s=time.monotonic() - started), "error"
    _finalize(delegation_id, result, status)


def _finalize(delegation_id: str, result, status: str) -> bool:
    """Finalize exactly once. ``result`` is a dict, or a callable of the record snapshot."""
    with _records_lock:
        record = _records.get(delegation_id)
        if record is None or record["status"] not in _ACTIVE_STATES:
            return False  # already finalized (e.g. forced stall, then the runner returned)
        record.update(status="finalizing", completed_at=time.time(), interrupt_fn=None, progress_fn=None)
        _release_slot_locked(record["slot_key"])
        snapshot = dict(record)
    if callable(result):
        result = result(snapshot)
    _push_completion_event(snapshot, result, status)
    notify("finalized", delegation_id, record=snapshot, status=status)
    with _records_lock:
        record["status"] = status
        _prune_completed_locked()
    if snapshot.get("_ledger") is not None:
        _delivery.maybe_prune(snapshot["_ledger"])
    return True


def _push_completion_event(snapshot: dict[str, Any], result: dict[str, Any], status: str) -> None:
    evt = build_event(snapshot, result, status)
    try:
        _persist_completion(evt, result, snapshot)
    except Exception:
        logger.exception("Async delegation %s: durable completion write failed; delivering in-memory only "
                         "(a restart may report this unit as unknown)", evt["delegation_id"])
    try:
        process_registry.completion_queue.put(evt)
    except Exception:
        logger.exception("Async delegation %s: could not queue the completion; result lost", evt["delegation_id"])


def _persist_completion(evt: dict[str, Any], result: dict[str, Any], snapshot: dict[str, Any] | None = None) -> None:
    record = snapshot or _records.get(evt["delegation_id"]) or {}
    ledger, row = record.get("_ledger"), record.get("_ledger_row")
    if ledger is None or row is None:
        return
    try:
        ledger.persist_completion(row, evt, result, time.time())
    except Exception as exc:
        _delivery.report_ledger_error(ledger, "recording a completion", exc,
                                      "The result is delivered in memory only.")
        return
    _delivery.note_ledger_ok(ledger)


def record_unit_child(delegation_id: str, entry: dict[str, Any]) -> bool:
    """Record one finished child of a running unit, in memory and durably, right away."""
    with _records_lock:
        record = _records.get(delegation_id)
        if record is None or record["status"] not in _ACTIVE_STATES:
            return False
        partial = [e for e in record.get("_partial_results", []) if e.get("task_index") != entry.get("task_index")]
        record["_partial_results"] = [*partial, entry]
        ledger = record.get("_ledger")
    if ledger is None:
        return False
    notify("child_recorded", delegation_id, entry=entry)
    try:
        return ledger.record_unit_child(delegation_id, entry, time.time())
    except Exception as exc:  # best effort: a failing record must never fail the unit runner
        _delivery.report_ledger_error(ledger, "recording a finished child", exc,
                                      "A crash before the unit ends would report this child as unknown.")
        return False


def _prune_completed_locked() -> None:
    """Drop the oldest terminal records beyond the retention count; never a live one."""
    done = [r for r in _records.values() if r.get("status") not in _LIVE_STATES]
    excess = len(done) - _MAX_RETAINED_COMPLETED
    if excess <= 0:
        return
    done.sort(key=lambda r: r.get("completed_at") or r.get("dispatched_at") or 0.0)
    for record in done[:excess]:
        _records.pop(record["delegation_id"], None)


from tools.async_delegation_control import (  # noqa: E402,F401 - queries and the monitor loop
    _check_stalls, _ensure_stale_monitor, _reset_for_tests, active_count, active_task_count,
    has_live_for_session, interrupt_all, interrupt_delegation, interrupt_for_session, list_async_delegations,
)
