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

from delegation.ledger import DelegationLedger, LedgerError, LedgerRow, open_ledger
from delegation.observers import notify
from tools.async_delegation_recovery import git_state_hint, recovered_event
from tools.hermes_home import state_db_path
from tools.process_liveness import owner_alive

logger = logging.getLogger("tools.async_delegation")



def _policy():
    """The engine module, which owns the delivery policy numbers (lease, attempt budget,
    ages). Read at call time so a patched constant takes effect; no backend hard-codes them."""
    from tools import async_delegation
    return async_delegation


_ledgers: dict[tuple[int, str], DelegationLedger] = {}
_ledgers_lock = threading.Lock()
_reported: set[tuple[str, str]] = set()  # (location, kind) already logged at error level
_reported_lock = threading.Lock()  # workers, dispatchers and consumers report concurrently
_last_prune: dict[str, float] = {}
_last_sweep: dict[str, float] = {}
_offered: dict[tuple[str, str], float] = {}  # (ledger location, delegation id) -> when we last offered it


def current_ledger() -> DelegationLedger:
    """The ledger of the current ``$HERMES_HOME``; one per process and store."""
    path = state_db_path()
    key = (os.getpid(), str(path))  # a forked child must not share its parent's connection
    with _ledgers_lock:
        ledger = _ledgers.get(key)
        if ledger is None:
            ledger = _ledgers[key] = open_ledger(path)
        return ledger


def report_ledger_error(ledger: DelegationLedger, op: str, exc: BaseException, consequence: str) -> None:
    """Log a ledger failure once per file and kind; repeats go to debug, not a log storm."""
    err = exc if isinstance(exc, LedgerError) else LedgerError(f"{type(exc).__name__}: {exc}")
    marker = (ledger.location, err.kind)
    notify("ledger_error", "", kind=err.kind, op=op)
    with _reported_lock:
        repeated = marker in _reported
        _reported.add(marker)
    if repeated:
        logger.debug("ledger %s failed again: %s", op, err)
        return
    logger.error("Delegation ledger: %s failed: %s. %s", op, err, consequence)


def note_ledger_ok(ledger: DelegationLedger) -> None:
    """An operation succeeded: re-arm error reporting for this file."""
    if not _reported:
        return
    location = ledger.location
    with _reported_lock:
        _reported.difference_update([m for m in _reported if m[0] == location])


def maybe_prune(ledger: DelegationLedger, now: float | None = None) -> None:
    """Prune settled rows at most once per interval per file, off the dispatch path."""
    now = time.time() if now is None else now
    key = ledger.location
    if now - _last_prune.get(key, 0.0) < _policy()._DURABLE_PRUNE_INTERVAL_S:
        return
    _last_prune[key] = now
    try:
        ledger.prune(now, _policy()._DURABLE_RETENTION_SECONDS, _policy()._MAX_RETAINED_SETTLED)
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
            notify("recovered", row.delegation_id, row=row, event=event)
            logger.warning("Recovered delegation %s whose owner (pid %s) exited mid-run: %s",
                           row.delegation_id, row.owner_pid, event["error"])
    return settled


def restore_undelivered_completions(target_queue: queue.Queue, now: float | None = None) -> int:
    """Recover abandoned rows, then put every deliverable pending event on ``target_queue``.

    Replayed events are stamped ``restored=True`` (in memory only), so a drain without an
    ownership filter leaves them for a consumer that can prove it owns them.
    """
    return _offer_orphans(target_queue, time.time() if now is None else now, only_new=False)


def maybe_sweep_orphaned_completions(target_queue: queue.Queue, now: float | None = None) -> int:
    """While running, offer rows that became deliverable here since the last offer: their owner
    died after our restore, or a consumer died holding a claim that has now expired. At most
    once per ``_ORPHAN_SWEEP_INTERVAL_S`` per home; never raises."""
    now = time.time() if now is None else now
    key = str(state_db_path())
    if now - _last_sweep.get(key, 0.0) < _policy()._ORPHAN_SWEEP_INTERVAL_S:
        return 0
    _last_sweep[key] = now
    try:
        return _offer_orphans(target_queue, now, only_new=True)
    except Exception:
        logger.debug("orphan sweep failed", exc_info=True)
        return 0


def _offer_orphans(target_queue: queue.Queue, now: float, *, only_new: bool) -> int:
    ledger = current_ledger()
    if not ledger.exists():
        return 0  # replay never creates a ledger
    offered = 0
    try:
        recover_abandoned_delegations(now)
        for row in ledger.pending_rows():
            if not _should_offer(ledger, row, now, only_new):
                continue
            event = dict(row.event or {})
            event["restored"] = True
            target_queue.put(event)
            _offered[(ledger.location, row.delegation_id)] = now
            offered += 1
    except LedgerError as exc:
        # An unreadable or locked ledger must not take the consumer down with it; what it
        # holds stays there and is replayed by the first start after it is repaired.
        report_ledger_error(ledger, "restoring undelivered completions", exc,
                            "Undelivered results recorded there are replayed once it is readable again.")
    return offered


def _should_offer(ledger: DelegationLedger, row: LedgerRow, now: float, only_new: bool) -> bool:
    if owner_alive(row.owner_pid, row.owner_started_at):
        return False  # its owner is running and delivers it itself
    claim_live = row.delivery_claim is not None and (row.delivery_claimed_at or 0.0) >= now - _policy()._CLAIM_LEASE_S
    last_offer = _offered.get((ledger.location, row.delegation_id))
    reclaimable = not claim_live and (row.delivery_claimed_at or 0.0) > (last_offer or 0.0)
    if only_new and last_offer is not None and not reclaimable:
        return False  # still on our queue, or being delivered right now
    # A row someone holds a live claim on is offered but never dropped for its attempt count.
    return claim_live or _still_deliverable(ledger, row, now)


def _still_deliverable(ledger: DelegationLedger, row: LedgerRow, now: float) -> bool:
    age_s = now - (row.completed_at or row.dispatched_at)
    if age_s > _policy()._MAX_COMPLETION_REPLAY_AGE_S:
        reason = f"{age_s / 3600:.1f}h old (cap {_policy()._MAX_COMPLETION_REPLAY_AGE_S / 3600:.1f}h)"
    elif row.delivery_attempts >= _policy()._MAX_DELIVERY_ATTEMPTS:
        reason = f"it exhausted its {_policy()._MAX_DELIVERY_ATTEMPTS} delivery attempts"
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
        outcome = fn(ledger, *args)
    except LedgerError as exc:
        report_ledger_error(ledger, op, exc, "Delivery continues in memory.")
        return default
    note_ledger_ok(ledger)
    return outcome


def claim_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    """Claim a row for delivery. True also when there is no row (nothing durable to guard)."""
    def claim(ledger: DelegationLedger) -> bool:
        got = ledger.claim_delivery(delegation_id, claim_id, time.time(), _policy()._CLAIM_LEASE_S)
        return True if got is None else got
    return _told(delegation_id, "claimed", _guarded("claim", True, claim))


def complete_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    return _told(delegation_id, "delivered", _guarded(
        "complete delivery", False, lambda l: l.complete_delivery(delegation_id, claim_id, time.time())))


def release_completion_delivery(delegation_id: str, claim_id: str) -> str:
    state = _guarded("release delivery", "", lambda l: l.release_delivery(
        delegation_id, claim_id, time.time(), _policy()._MAX_DELIVERY_ATTEMPTS))
    _told(delegation_id, "released", bool(state))
    if state == "dropped":
        _told(delegation_id, "dropped", True)
        logger.warning("Delegation %s exhausted its %d delivery attempts and was dropped; the result remains "
                       "queryable with `offload inbox --all`.", delegation_id, _policy()._MAX_DELIVERY_ATTEMPTS)
    return state


def defer_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    return _guarded("defer delivery", False, lambda l: l.defer_delivery(delegation_id, claim_id, time.time()))


def drop_completion_delivery(delegation_id: str, claim_id: str | None = None) -> bool:
    return _told(delegation_id, "dropped", _guarded(
        "drop delivery", False, lambda l: l.drop_delivery(delegation_id, claim_id, time.time())))


def mark_completion_delivered(delegation_id: str) -> bool:
    """Acknowledge unconditionally (no claim needed). True iff the row changed."""
    return _told(delegation_id, "acknowledged", _guarded(
        "acknowledge", False, lambda l: l.mark_delivered(delegation_id, time.time())))


def _told(delegation_id: str, outcome: str, changed: Any) -> Any:
    """Tell observers about a delivery step that changed the row; returns ``changed``."""
    if changed:
        notify("delivery", delegation_id, outcome=outcome)
    return changed


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
    with _reported_lock:
        _reported.clear()
    _last_prune.clear()
    _last_sweep.clear()
    _offered.clear()
