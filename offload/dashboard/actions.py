"""The dashboard's buttons: interrupt, ack, drop — the engine and ledger calls the CLI makes.

Each returns ``(ok, message)``; the message says what happened or what the user must do.
A unit this process runs is interrupted at once; a unit of another live offload process (on
this host, or on any host sharing a PostgreSQL ledger) gets a control request in the ledger
(``offload.owner.control_requests``), which that process carries out through the same engine call.
A queued unit (issue 29: waiting for a slot) has no process running it: it is taken from the
queue here and reported to its session as interrupted, never run, as ``offload stop`` does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from offload.owner import control_requests
from offload.engine.states import QUEUED, UNFINISHED
from offload.ledger import LedgerError
from offload.ledger.queries import existing_ledger

if TYPE_CHECKING:
    from offload.runtime import Offload


def interrupt(off: Offload, delegation_id: str) -> tuple[bool, str]:
    if off.engine.interrupt_one(delegation_id, reason="dashboard") > 0:
        return True, f"interrupt sent to {delegation_id}; it reports what it has when it stops"
    row = _row(off, delegation_id)
    if row is None:
        return False, f"no delegation {delegation_id!r}: it is not running here and not in the ledger"
    if row.state == QUEUED:
        return _stop_queued(off, delegation_id)
    if row.state != "running":
        return False, f"{delegation_id} is not running (it is {row.state})"
    owner = control_requests.owner_label(row)
    if control_requests.owner_gone(off.ledger(), row):
        return False, (f"the process that ran {delegation_id} ({owner}) has exited; the next offload "
                       "command that reads the ledger (e.g. `offload inbox`) reports it as unknown")
    try:
        control_requests.request(off.ledger(), delegation_id)
    except LedgerError as exc:
        return False, f"{exc}; stop it in the process that runs it ({owner})"
    return True, (f"interrupt requested from {owner}, which runs {delegation_id}; it stops within a second "
                  "or two and reports what it has")


def _stop_queued(off: Offload, delegation_id: str) -> tuple[bool, str]:
    if off.admission.cancel(lambda r: r.delegation_id == delegation_id, "stopped from the dashboard"):
        return True, (f"stopped {delegation_id} before it started: it never runs, and its session gets it as "
                      "interrupted")
    return False, f"{delegation_id} started meanwhile; interrupt it again to stop it running"


def ack(off: Offload, delegation_id: str) -> tuple[bool, str]:
    """Acknowledge a pending result without delivering it, as `offload inbox --ack` does."""
    return _settle(off, delegation_id, off.deliveries.mark_delivered,
                   f"acknowledged {delegation_id}; it will not be delivered")


def drop(off: Offload, delegation_id: str) -> tuple[bool, str]:
    """Give up delivering a pending result; it stays visible in the history as dropped."""
    return _settle(off, delegation_id, lambda did: off.deliveries.drop(did, None, "dropped from the dashboard"),
                   f"dropped {delegation_id}; it stays in the history")


def _settle(off: Offload, delegation_id: str, settle: Callable[[str], bool], done: str) -> tuple[bool, str]:
    """Ack and drop differ only in the engine call that ends the row's delivery."""
    problem = _not_pending(off, delegation_id)
    if problem:
        return False, problem
    if settle(delegation_id):
        return True, done
    return False, f"{delegation_id} changed meanwhile; reload to see its state"


def _row(off: Offload, delegation_id: str):
    ledger = existing_ledger(off.ledger())
    return ledger.get(delegation_id) if ledger else None


def _not_pending(off: Offload, delegation_id: str) -> str | None:
    row = _row(off, delegation_id)
    if row is None:
        return f"no delegation {delegation_id!r} in the ledger"
    if row.state in UNFINISHED:
        return f"{delegation_id} is still {row.state}; interrupt it first"
    if row.delivery_state != "pending":
        return f"{delegation_id} is already {row.delivery_state}"
    return None


ACTIONS = {"interrupt": interrupt, "ack": ack, "drop": drop}
