"""Engine queries and control: counts, the live roster, interrupts, and the stall-monitor
loop. State lives in ``tools.async_delegation`` (read through the module at call time, so
patched constants take effect); this module only reads it under the lock and acts outside.

The monitor is one daemon thread (``async-delegate-stale-monitor``): a tiny loop that waits
``_STALE_CHECK_INTERVAL`` and calls :func:`_check_stalls`; it exits when nothing is left to
watch, and the next monitored dispatch starts it again.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from tools.async_delegation_events import stalled_result, unit_task_indexes
from tools.async_delegation_monitor import UNREADABLE, Observation, Thresholds, sweep
from delegation.observers import notify

logger = logging.getLogger("tools.async_delegation")


_CALLABLE_KEYS = frozenset({"interrupt_fn", "progress_fn"})  # public names, never listed


# -- counts and the roster ---------------------------------------------------------------
def active_count() -> int:
    """Units still live (running, stalling or finalizing)."""
    with ad._records_lock:
        return sum(1 for r in ad._records.values() if r.get("status") in ad._LIVE_STATES)


def active_task_count() -> int:
    """Child subagents in running or finalizing units."""
    with ad._records_lock:
        units = [r for r in ad._records.values() if r.get("status") in ("running", "finalizing")]
        return sum(len(unit_task_indexes(r)) if r.get("is_batch") else 1 for r in units)


def _session_selected(record: dict[str, Any], session_key: str, ui: str, parent: str) -> bool:
    return bool((session_key and record.get("session_key") == session_key)
                or (ui and record.get("origin_ui_session_id") == ui)
                or (parent and record.get("parent_session_id") == parent))


def has_live_for_session(session_key: str = "", origin_ui_session_id: str = "", parent_session_id: str = "") -> bool:
    with ad._records_lock:
        return any(r.get("status") in ad._LIVE_STATES
                   and _session_selected(r, session_key, origin_ui_session_id, parent_session_id)
                   for r in ad._records.values())


def list_async_delegations() -> list[dict[str, Any]]:
    """Snapshot of every record for /agents UIs: no callables, no private keys; active
    records carry ``seconds_since_progress`` and per-child live activity."""
    now_mono = time.monotonic()
    with ad._records_lock:
        raw = [(dict(r), r.get("progress_fn")) for r in ad._records.values()]
    items = []
    for record, progress_fn in raw:
        item = {k: v for k, v in record.items() if k[:1] != "_" and k not in _CALLABLE_KEYS}
        if record.get("status") in ad._ACTIVE_STATES:
            item["seconds_since_progress"] = round(now_mono - record.get("_progress_ts", now_mono), 2)
            _add_live_activity(item, progress_fn)
        if record.get("status") in ("stalling", "stalled"):
            item.update(_public_stall_fields(record))
        items.append(item)
    return items


def _add_live_activity(item: dict[str, Any], progress_fn) -> None:
    if progress_fn is None:
        return
    try:
        token, in_tool = progress_fn()  # sampled outside the lock: a slow sampler blocks no one
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


# -- interrupts ------------------------------------------------------------------------------
def interrupt_all(reason: str = "shutdown") -> int:
    """Ask every running/stalling unit to stop; each still reports through finalize."""
    return _interrupt(lambda r: True, reason)


def interrupt_for_session(session_key: str = "", origin_ui_session_id: str = "", parent_session_id: str = "",
                          reason: str = "session_end") -> int:
    return _interrupt(lambda r: _session_selected(r, session_key, origin_ui_session_id, parent_session_id), reason)


def interrupt_delegation(delegation_id: str, reason: str = "user") -> int:
    """Ask one running/stalling unit of this process to stop; 1 if signalled, else 0."""
    return _interrupt(lambda r: r.get("delegation_id") == delegation_id, reason)


def _interrupt(selected, reason: str) -> int:
    with ad._records_lock:
        targets = [(r["delegation_id"], r.get("interrupt_fn")) for r in ad._records.values()
                   if r.get("status") in ad._ACTIVE_STATES and selected(r)]
    signalled = 0
    for delegation_id, interrupt_fn in targets:
        if interrupt_fn is None:
            continue
        try:
            interrupt_fn()
            signalled += 1
            notify("interrupted", delegation_id, reason=reason)
        except Exception:
            logger.debug("interrupt_fn of %s raised (%s)", delegation_id, reason, exc_info=True)
    if targets:
        logger.info("Interrupted %d of %d background delegation(s): %s", signalled, len(targets), reason)
    return signalled


# -- stall monitor ------------------------------------------------------------------------------
def _ensure_stale_monitor() -> None:
    with ad._monitor_lock:
        if ad._monitor_thread is not None and ad._monitor_thread.is_alive():
            return
        ad._monitor_stop.clear()
        ad._monitor_thread = threading.Thread(target=_monitor_loop, name="async-delegate-stale-monitor", daemon=True)
        ad._monitor_thread.start()


def _monitor_loop() -> None:
    while not ad._monitor_stop.wait(ad._STALE_CHECK_INTERVAL):
        try:
            keep_going = _check_stalls(time.monotonic())
        except Exception:  # the monitor outlives any bug in one sweep
            logger.exception("stall check failed")
            keep_going = True
        if not keep_going:
            with ad._monitor_lock:
                if not _has_monitorable():  # re-checked under the lock a dispatch takes to start us
                    ad._monitor_thread = None
                    return


def _has_monitorable() -> bool:
    with ad._records_lock:
        return any(r.get("status") == "stalling" or (r.get("status") == "running" and r.get("progress_fn"))
                   for r in ad._records.values())


def _check_stalls(now: float) -> bool:
    """One sweep at monotonic time ``now``. Returns whether anything is left to watch."""
    with ad._records_lock:
        watched = [(r["delegation_id"], r["status"], r.get("_started"), r.get("progress_fn"), r.get("_progress_token"),
                    r.get("_progress_ts", now), r.get("_interrupted_at"))
                   for r in ad._records.values()
                   if r.get("status") == "stalling" or (r.get("status") == "running" and r.get("progress_fn"))]
    observations = [Observation(did, status, bool(started), *_sample(fn, status, started, last), last, ts, at)
                    for did, status, started, fn, last, ts, at in watched]
    limits = Thresholds(ad._STALE_IDLE_SECONDS, ad._STALE_IN_TOOL_SECONDS, ad._STALL_GRACE_SECONDS)
    decisions = sweep(observations, now, limits)
    interrupts = _apply_decisions(decisions, now)
    for delegation_id, interrupt_fn in interrupts:
        _signal_stalled(delegation_id, interrupt_fn)
    for delegation_id in decisions.expired:
        _force_stalled(delegation_id, limits.grace_s)
    return decisions.monitorable


def _sample(progress_fn, status: str, started: bool, last: Any) -> tuple[Any, bool]:
    if status != "running" or not started or progress_fn is None:
        return last, False
    try:
        token, in_tool = progress_fn()
        return token, bool(in_tool)
    except Exception:
        return UNREADABLE, False  # an unreadable child must never look permanently healthy


def _apply_decisions(decisions, now: float) -> list[tuple[str, Any]]:
    interrupts = []
    with ad._records_lock:
        for delegation_id, token in decisions.progressed.items():
            record = ad._records.get(delegation_id)
            if record is not None and record["status"] == "running":
                record["_progress_token"], record["_progress_ts"] = token, now
        for stall in decisions.stalled:
            record = ad._records.get(stall.delegation_id)
            if record is None or record["status"] != "running":
                continue  # finished while we sampled
            record.update(status="stalling", _interrupted_at=now, _stall_quiet_seconds=stall.quiet_s,
                          _stall_threshold_seconds=stall.threshold_s, _stall_in_tool=stall.in_tool)
            interrupts.append((stall.delegation_id, record.get("interrupt_fn")))
    return interrupts


def _signal_stalled(delegation_id: str, interrupt_fn) -> None:
    logger.warning("Async delegation %s made no progress past its threshold; interrupting it", delegation_id)
    notify("stalled", delegation_id)
    if interrupt_fn is None:
        return
    try:
        interrupt_fn()
    except Exception:
        logger.debug("interrupt_fn of stalled %s raised", delegation_id, exc_info=True)


def _force_stalled(delegation_id: str, grace_s: float) -> None:
    with ad._records_lock:
        record = ad._records.get(delegation_id)
        context = record.get("_context") if record else None
    finalize = lambda: ad._finalize(  # noqa: E731
        delegation_id, lambda snap: stalled_result(snap, grace_s=grace_s, now=time.time()), "stalled")
    context.copy().run(finalize) if context is not None else finalize()


def _reset_for_tests() -> None:
    with ad._executor_lock:
        if ad._executor is not None:
            ad._executor.shutdown(wait=False)
        ad._executor = None
    ad._monitor_stop.set()
    thread = ad._monitor_thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=2)
    ad._monitor_thread = None
    with ad._records_lock:
        ad._records.clear()
        ad._active_slots.clear()
    delivery.reset_for_tests()
