"""Read-only views of the delegation ledger for UIs in another process (``offload agents``,
``offload inbox``): rows still running, rows awaiting delivery, and recently settled rows.

Another process cannot see the engine's in-memory records, so these read ``state.db``.
Invariants: nothing here writes, and nothing creates a ledger that does not exist (an empty
list is returned instead).
"""
from __future__ import annotations

from offload.default_runtime.delivery import current_ledger
from offload.ledger import LedgerRow


def running_rows() -> list[LedgerRow]:
    ledger = current_ledger()
    return ledger.running_rows() if ledger.exists() else []


def pending_rows() -> list[LedgerRow]:
    """Finished rows whose result has not been acknowledged, oldest first."""
    ledger = current_ledger()
    return ledger.pending_rows() if ledger.exists() else []


def settled_rows(limit: int = 20) -> list[LedgerRow]:
    """Delivered or dropped rows, most recently updated first."""
    ledger = current_ledger()
    if not ledger.exists():
        return []
    return ledger.settled_rows(limit)
