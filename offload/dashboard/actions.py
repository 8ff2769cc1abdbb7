"""The dashboard's buttons: interrupt, ack, drop — the engine and ledger calls the CLI makes.

Each returns ``(ok, message)``; the message says what happened or what the user must do.
Interrupting reaches only units this process runs (the engine's interrupt functions are
in-memory); a unit of another live process is stopped there (``/stop`` in its chat).
"""
from __future__ import annotations

from tools import async_delegation as engine
from tools.async_delegation_delivery import current_ledger


def interrupt(delegation_id: str) -> tuple[bool, str]:
    if engine.interrupt_delegation(delegation_id, reason="dashboard") > 0:
        return True, f"interrupt sent to {delegation_id}; it reports what it has when it stops"
    row = _row(delegation_id)
    if row is None:
        return False, f"no delegation {delegation_id!r}: it is not running here and not in the ledger"
    if row.state != "running":
        return False, f"{delegation_id} is not running (it is {row.state})"
    return False, (f"{delegation_id} runs in process {row.owner_pid}, not in this dashboard's process: "
                   "stop it there (/stop in its chat, Ctrl-C in `offload run`)")


def ack(delegation_id: str) -> tuple[bool, str]:
    """Acknowledge a pending result without delivering it, as `offload inbox --ack` does."""
    problem = _not_pending(delegation_id)
    if problem:
        return False, problem
    if engine.mark_completion_delivered(delegation_id):
        return True, f"acknowledged {delegation_id}; it will not be delivered"
    return False, f"{delegation_id} changed meanwhile; reload to see its state"


def drop(delegation_id: str) -> tuple[bool, str]:
    """Give up delivering a pending result; it stays visible in the history as dropped."""
    problem = _not_pending(delegation_id)
    if problem:
        return False, problem
    if engine.drop_completion_delivery(delegation_id):
        return True, f"dropped {delegation_id}; it stays in the history"
    return False, f"{delegation_id} changed meanwhile; reload to see its state"


def _row(delegation_id: str):
    ledger = current_ledger()
    return ledger.get(delegation_id) if ledger.exists() else None


def _not_pending(delegation_id: str) -> str | None:
    row = _row(delegation_id)
    if row is None:
        return f"no delegation {delegation_id!r} in the ledger"
    if row.state == "running":
        return f"{delegation_id} is still running; interrupt it first"
    if row.delivery_state != "pending":
        return f"{delegation_id} is already {row.delivery_state}"
    return None


ACTIONS = {"interrupt": interrupt, "ack": ack, "drop": drop}
