"""Stopping a unit that another process -- on this host or any host sharing the ledger -- runs.

A unit can be interrupted only by the engine of the process that runs it. So ``offload stop``
and the dashboard leave a control request in the ledger, keyed by delegation id, with an
expiry (``request``); every owner (chat, run, gateway, worker) takes the requests for the
units it runs (``act_on_requests``, from ``offload.owner.loop``) and interrupts them through
the same engine call as a local ``/stop``. The requester sees the result as the ledger row
leaving ``running``.

Invariants: a request is taken by at most one process (the ledger's take is atomic) and only
by the one that runs the unit; a request nobody takes is removed once expired, so a unit
dispatched later under the same id is never stopped by a stale request.
"""
from __future__ import annotations

import logging
import time

from offload.engine.engine import Delegations
from offload.engine.liveness import owner_alive
from offload.engine.states import ACTIVE_STATES
from offload.ledger import DelegationLedger, LedgerError, LedgerRow

logger = logging.getLogger(__name__)

INTERRUPT = "interrupt"
REQUEST_TTL_S = 60.0  # an owner acts within a second (a few on a missed notification); this is slack


def request(ledger: DelegationLedger, delegation_id: str, ttl_s: float = REQUEST_TTL_S) -> None:
    """Ask whichever process runs ``delegation_id`` to interrupt it, within ``ttl_s``.

    Raises ``LedgerError`` when the request cannot be written (e.g. a read-only home), naming
    the ledger and what to do."""
    now = time.time()
    try:
        ledger.request_control(delegation_id, INTERRUPT, now, now + ttl_s)
    except LedgerError as exc:
        raise LedgerError(f"cannot ask the owner of {delegation_id} to stop: {exc}", kind=exc.kind) from exc


def withdraw(ledger: DelegationLedger, delegation_id: str) -> None:
    """Remove a request nobody took (the requester gave up waiting)."""
    try:
        ledger.withdraw_control(delegation_id)
    except LedgerError:
        logger.debug("withdrawing the stop request of %s failed; it expires by itself", delegation_id, exc_info=True)


def owner_gone(ledger: DelegationLedger, row: LedgerRow) -> bool:
    """Whether the process that ran ``row`` is gone (pid check on this host, lease elsewhere)."""
    return ledger.is_abandoned(row, owner_alive)


def owner_label(row: LedgerRow) -> str:
    host = (row.extra or {}).get("owner_host")
    return f"process {row.owner_pid}" + (f" on {host}" if host else "")


def owned_live_ids(engine: Delegations) -> list[str]:
    return [i["delegation_id"] for i in engine.list() if i.get("status") in ACTIVE_STATES]


def act_on_requests(engine: Delegations, ledger: DelegationLedger, now: float,
                    owned: list[str] | None = None) -> list[str]:
    """Take the requests for the units ``engine`` runs and interrupt them; the ids signalled.
    With nothing requested this is one ledger read: the engine is not even asked for its units."""
    requested = ledger.requested_controls(now)
    if not requested:
        return []
    owned = set(owned_live_ids(engine) if owned is None else owned).intersection(requested)
    stopped = []
    for delegation_id, action in ledger.take_control(sorted(owned), now):
        if action == INTERRUPT and engine.interrupt_one(delegation_id, reason="stop request"):
            logger.info("stopped %s on request", delegation_id)
            stopped.append(delegation_id)
    return stopped
