"""hermes path ``tools.async_delegation_delivery``: durable delivery (replay, claims) of the
default runtime's ``offload.engine.delivery.Deliveries``, under its hermes-era names.

``current_ledger()`` is the ledger of ``$HERMES_HOME`` (or ``ledger.url``) as it is at each
call: one instance per process and store, opened by ``offload.ledger.select`` and kept here,
so a test (or a hermes host) may change the home mid-process. ``owner_alive`` is read through
this module at call time, so tests may patch it here.
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Any

from offload.engine.liveness import current_owner
from offload.engine.liveness import owner_alive  # noqa: F401 - the runtime reads it here, per call
from offload.home import state_db_path
from offload.ledger import DelegationLedger
from offload.ledger.select import ledger_key, open_selected_ledger

_ledgers: dict[tuple[int, str], DelegationLedger] = {}
_ledgers_lock = threading.Lock()


def current_ledger() -> DelegationLedger:
    """The ledger of the current settings (``ledger.url``, else ``$HERMES_HOME/state.db``);
    one per process and store."""
    path = state_db_path()
    key = (os.getpid(), ledger_key(path))  # a forked child must not share its parent's connection
    with _ledgers_lock:
        ledger = _ledgers.get(key)
        if ledger is None:
            ledger = _ledgers[key] = open_selected_ledger(path, current_owner)
        return ledger


def _deliveries():
    from tools.async_delegation import runtime

    return runtime().deliveries


def report_ledger_error(ledger: DelegationLedger, op: str, exc: BaseException, consequence: str) -> None:
    _deliveries().health.report(ledger, op, exc, consequence)


def note_ledger_ok(ledger: DelegationLedger) -> None:
    _deliveries().health.ok(ledger)


def maybe_prune(ledger: DelegationLedger, now: float | None = None) -> None:
    deliveries = _deliveries()
    deliveries.health.maybe_prune(ledger, deliveries.policy, now)


# -- the hermes-era names of the delivery operations -----------------------------------------------
def recover_abandoned_delegations(now: float | None = None) -> int:
    return _deliveries().recover_abandoned(now)


def restore_undelivered_completions(target_queue: queue.Queue, now: float | None = None) -> int:
    return _deliveries().restore(target_queue, now)


def maybe_sweep_orphaned_completions(target_queue: queue.Queue, now: float | None = None) -> int:
    return _deliveries().maybe_sweep(target_queue, now)


def claim_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    return _deliveries().claim(delegation_id, claim_id)


def complete_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    return _deliveries().complete(delegation_id, claim_id)


def release_completion_delivery(delegation_id: str, claim_id: str, why: str = "") -> str:
    return _deliveries().release(delegation_id, claim_id, why)


def defer_completion_delivery(delegation_id: str, claim_id: str) -> bool:
    return _deliveries().defer(delegation_id, claim_id)


def drop_completion_delivery(delegation_id: str, claim_id: str | None = None, reason: str | None = None) -> bool:
    return _deliveries().drop(delegation_id, claim_id, reason)


def record_delivery_progress(delegation_id: str, claim_id: str, parts: int) -> bool:
    return _deliveries().record_progress(delegation_id, claim_id, parts)


def mark_completion_delivered(delegation_id: str) -> bool:
    return _deliveries().mark_delivered(delegation_id)


def claim_event_delivery(evt: dict[str, Any], consumer: str) -> str | None:
    return _deliveries().claim_event(evt, consumer)


def complete_event_delivery(evt: dict[str, Any], claim_id: str | None) -> bool:
    return _deliveries().complete_event(evt, claim_id)


def release_event_delivery(evt: dict[str, Any], claim_id: str | None, why: str = "") -> str:
    return _deliveries().release_event(evt, claim_id, why)


def get_durable_delegation(delegation_id: str) -> dict[str, Any] | None:
    return _deliveries().get(delegation_id)


def reset_for_tests() -> None:
    with _ledgers_lock:
        for ledger in _ledgers.values():
            ledger.close()
        _ledgers.clear()
    _deliveries().reset()
