"""Durable side of delivery: which ledger, replay after restart, and the claim protocol.

Delivery is at-least-once and deduplicated by delegation id: a consumer claims a row with a
lease, injects the result, and completes the claim only after the new turn is stored. Two
consumers never both hold a live claim, and a consumer that dies mid-delivery leaves the row
claimable again once the lease expires.

Replay never creates a database, runs only when a consumer asks (never at import), skips
rows whose owner process is still alive (the owner delivers them itself), recovers rows
whose owner died, and drops rows past the replay age cap or the attempt budget (they stay
queryable). Ledger failures are logged once per kind, never raised into a worker.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
from typing import Any

from tools.async_delegation_ledger import LedgerError, LedgerRow
from tools.async_delegation_recovery import git_state_hint, recovered_event
from tools.async_delegation_sqlite import SqliteLedger
from tools.hermes_home import state_db_path
from tools.process_liveness import owner_alive

logger = logging.getLogger("tools.async_delegation")

# Delivery policy. Read at call time; a backend never hard-codes these.
_MAX_DELIVERY_ATTEMPTS = 8
_MAX_COMPLETION_REPLAY_AGE_S = 48 * 3600.0
_CLAIM_LEASE_S = 300.0
_DURABLE_RETENTION_SECONDS = 7 * 24 * 3600.0
_MAX_RETAINED_SETTLED = 1000
_DURABLE_PRUNE_INTERVAL_S = 60.0

_ledgers: dict[tuple[int, str], SqliteLedger] = {}
_ledgers_lock = threading.Lock()
_reported: set[tuple[str, str]] = set()  # (path, kind) already logged at error level
_last_prune: dict[str, float] = {}


def current_ledger() -> SqliteLedger:
    """The ledger of the current ``$HERMES_HOME``; one per process and file."""
    path = state_db_path()
    key = (os.getpid(), str(path))  # a forked child must not share its parent's connection
    with _ledgers_lock:
        ledger = _ledgers.get(key)
        if ledger is None:
            ledger = _ledgers[key] = SqliteLedger(path)
        return ledger


def report_ledger_error(ledger: SqliteLedger, op: str, exc: BaseException, consequence: str) -> None:
    """Log a ledger failure once per file and kind; repeats go to debug, not a log storm."""
    err = exc if isinstance(exc, LedgerError) else LedgerError(f"{type(exc).__name__}: {exc}")
    marker = (str(ledger.path), err.kind)
    if marker in _reported:
        logger.debug("ledger %s failed again: %s", op, err)
        return
    _reported.add(marker)
    logger.error("Delegation ledger: %s failed: %s. %s", op, err, consequence)


def note_ledger_ok(ledger: SqliteLedger) -> None:
    """A write succeeded: re-arm error reporting for this file."""
    if _reported:
        path = str(ledger.path)
        for marker in [m for m in _reported if m[0] == path]:
            _reported.discard(marker)


def maybe_prune(ledger: SqliteLedger, now: float | None = None) -> None:
    """Prune settled rows at most once per interval per file, off the dispatch path."""
    now = time.time() if now is None else now
    key = str(ledger.path)
    if now - _last_prune.get(key, 0.0) < _DURABLE_PRUNE_INTERVAL_S:
        return
    _last_prune[key] = now
    try:
        ledger.prune(now, _DURABLE_RETENTION_SECONDS, _MAX_RETAINED_SETTLED)
    except LedgerError as exc:
        report_ledger_error(ledger, "prune", exc, "Old delivered rows are kept until the next prune.")


# -- restart: recovery and replay ---------------------------------------------------------
def recover_abandoned_delegations(now: float | None = None) -> int:
    """Settle ``running`` rows whose owner process died as ``unknown``; returns how many."""
    ledger = current_ledger()
    if not ledger.exists():
        return 0
    now = time.time() if now is None else now
    hints: dict[str, str | None] = {}
    settled = 0
    for row in ledger.running_rows():
        if owner_alive(row.owner_pid, row.owner_started_at):
            continue
        cwd = (row.task or {}).get("owner_cwd")
        if cwd not in hints:
            hints[cwd] = git_state_hint(cwd)
        event, result = recovered_event(row, now, hints[cwd])
        if ledger.settle_abandoned(row.delegation_id, event, result, now):
            settled += 1
            logger.warning("Recovered delegation %s whose owner (pid %s) exited mid-run: %s",
                           row.delegation_id, row.owner_pid, event["error"])
    return settled


def restore_undelivered_completions(target_queue: queue.Queue, now: float | None = None) -> int:
    """Recover abandoned rows, then put every deliverable pending event on ``target_queue``.

    Replayed events are stamped ``restored=True`` (in memory only), so a drain without an
    ownership filter leaves them for a consumer that can prove it owns them.
    """
    ledger = current_ledger()
    if not ledger.exists():
        return 0  # replay never creates a ledger
    now = time.time() if now is None else now
    offered = 0
    try:
        recover_abandoned_delegations(now)
        for row in ledger.pending_rows():
            if owner_alive(row.owner_pid, row.owner_started_at):
                continue  # its owner is running and delivers it itself
            if not _still_deliverable(ledger, row, now):
                continue
            event = dict(row.event or {})
            event["restored"] = True
            target_queue.put(event)
            offered += 1
    except LedgerError as exc:
        # An unreadable or locked ledger must not take the consumer down with it; what it
        # holds stays there and is replayed by the first start after it is repaired.
        report_ledger_error(ledger, "restoring undelivered completions", exc,
                            "Undelivered results recorded there are replayed once it is readable again.")
    return offered


def _still_deliverable(ledger: SqliteLedger, row: LedgerRow, now: float) -> bool:
    age_s = now - (row.completed_at or row.dispatched_at)
    if age_s > _MAX_COMPLETION_REPLAY_AGE_S:
        reason = f"{age_s / 3600:.1f}h old (cap {_MAX_COMPLETION_REPLAY_AGE_S / 3600:.1f}h)"
    elif row.delivery_attempts >= _MAX_DELIVERY_ATTEMPTS:
        reason = f"it exhausted its {_MAX_DELIVERY_ATTEMPTS} delivery attempts"
    elif not row.event:
        reason = "its stored event is unreadable"
    else:
        return True
    ledger.drop_delivery(row.delegation_id, None, now)
    logger.warning("Not replaying delegation %s: %s; dropped (the result remains queryable with "
                   "`offload inbox --all`).", row.delegation_id, reason)
    return False


# -- claims ---------------------------------------------------------------------------------
def _guarded(op: str, default: Any, fn, *args: Any) -> Any:
    ledger = current_ledger()
    try:
        return fn(ledger, *args)
    except LedgerError as exc:
        report_ledger_error(ledger, op, exc, "Delivery continues in memory.")
        return default


def claim_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    """Claim a row for delivery. True also when there is no row (nothing durable to guard)."""
    def claim(ledger: SqliteLedger) -> bool:
        got = ledger.claim_delivery(delegation_id, claim_id, time.time(), _CLAIM_LEASE_S)
        return True if got is None else got
    return _guarded("claim", True, claim)


def complete_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    return _guarded("complete delivery", False, lambda l: l.complete_delivery(delegation_id, claim_id, time.time()))


def release_completion_delivery(delegation_id: str, claim_id: str) -> str:
    state = _guarded("release delivery", "", lambda l: l.release_delivery(
        delegation_id, claim_id, time.time(), _MAX_DELIVERY_ATTEMPTS))
    if state == "dropped":
        logger.warning("Delegation %s exhausted its %d delivery attempts and was dropped; the result remains "
                       "queryable with `offload inbox --all`.", delegation_id, _MAX_DELIVERY_ATTEMPTS)
    return state


def defer_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    return _guarded("defer delivery", False, lambda l: l.defer_delivery(delegation_id, claim_id, time.time()))


def drop_completion_delivery(delegation_id: str, claim_id: str | None = None) -> bool:
    return _guarded("drop delivery", False, lambda l: l.drop_delivery(delegation_id, claim_id, time.time()))


def mark_completion_delivered(delegation_id: str) -> bool:
    """Acknowledge unconditionally (no claim needed). True iff the row changed."""
    return _guarded("acknowledge", False, lambda l: l.mark_delivered(delegation_id, time.time()))


def _claimable(evt: dict[str, Any]) -> bool:
    return (evt.get("type") == "async_delegation" and bool(evt.get("delegation_id"))
            and not evt.get("task_failure_notice"))


def claim_event_delivery(evt: dict[str, Any], consumer: str) -> str | None:
    """Claim id to pass to complete/release, ``""`` if no claim is needed, None if another
    consumer holds the event."""
    if not _claimable(evt):
        return ""
    claim_id = f"{consumer}:{os.getpid()}:{uuid.uuid4().hex}"
    return claim_id if claim_completion_delivery(evt["delegation_id"], claim_id) else None


def complete_event_delivery(evt: dict[str, Any], claim_id: str | None) -> bool:
    if not claim_id or not _claimable(evt):
        return False
    return complete_completion_delivery(evt["delegation_id"], claim_id)


def release_event_delivery(evt: dict[str, Any], claim_id: str | None) -> str:
    if not claim_id or not _claimable(evt):
        return ""
    return release_completion_delivery(evt["delegation_id"], claim_id)


# -- queries ---------------------------------------------------------------------------------
def get_durable_delegation(delegation_id: str) -> dict[str, Any] | None:
    ledger = current_ledger()
    if not ledger.exists():
        return None
    row = _guarded("read", None, lambda l: l.get(delegation_id))
    if row is None:
        return None
    return {"delegation_id": row.delegation_id, "origin_session": row.origin_session, "state": row.state,
            "dispatched_at": row.dispatched_at, "completed_at": row.completed_at, "result": row.result,
            "event": row.event, "delivery_state": row.delivery_state, "delivery_attempts": row.delivery_attempts,
            "origin_session_id": row.origin_session_id, "parent_session_id": row.parent_session_id}


def reset_for_tests() -> None:
    with _ledgers_lock:
        for ledger in _ledgers.values():
            ledger.close()
        _ledgers.clear()
    _reported.clear()
    _last_prune.clear()
