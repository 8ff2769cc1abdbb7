"""Read-only views of the delegation ledger for UIs in another process (``offload agents``,
``offload inbox``): rows still running, rows awaiting delivery, and recently settled rows.

Another process cannot see the engine's in-memory records, so these read ``state.db``.
Invariants: nothing here writes, and nothing creates a ledger that does not exist (an empty
list is returned instead). A ledger that cannot be named because the settings are broken is
that error, never an empty list: an empty history would tell the user their work is gone.
"""
from __future__ import annotations

from offload.default_runtime.delivery import current_ledger
from offload.ledger import DelegationLedger, LedgerRow
from offload.ledger.select import MisconfiguredLedger


def existing_ledger() -> DelegationLedger | None:
    """The ledger to read, or None when none has been created yet; ``LedgerError`` (kind
    ``config``, the config error's text) when the ``ledger:`` settings cannot be used."""
    ledger = current_ledger()
    if isinstance(ledger, MisconfiguredLedger):
        raise ledger.error
    return ledger if ledger.exists() else None


def running_rows() -> list[LedgerRow]:
    ledger = existing_ledger()
    return ledger.running_rows() if ledger else []


def pending_rows() -> list[LedgerRow]:
    """Finished rows whose result has not been acknowledged, oldest first."""
    ledger = existing_ledger()
    return ledger.pending_rows() if ledger else []


def settled_rows(limit: int = 20) -> list[LedgerRow]:
    """Delivered or dropped rows, most recently updated first."""
    ledger = existing_ledger()
    return ledger.settled_rows(limit) if ledger else []
