"""Read-only views of a delegation ledger for UIs that cannot see the engine's in-memory
records (``offload agents``, ``offload inbox``, the dashboard, another process): rows still
running or queued, rows awaiting delivery, recently settled rows, and the counts ``/metrics`` and the overview report.

Invariants: nothing here writes, and nothing creates a ledger that does not exist (an empty
list is returned instead). A ledger that cannot be named because the settings are broken is
that error, never an empty list: an empty history would tell the user their work is gone.
"""
from __future__ import annotations

from offload.ledger.protocol import DelegationLedger, LedgerRow
from offload.ledger.select import MisconfiguredLedger
from offload.ledger.tally import UnitCounts


def existing_ledger(ledger: DelegationLedger) -> DelegationLedger | None:
    """``ledger`` to read, or None when it has not been created yet; ``LedgerError`` (kind
    ``config``, the config error's text) when the ``ledger:`` settings cannot be used."""
    if isinstance(ledger, MisconfiguredLedger):
        raise ledger.error
    return ledger if ledger.exists() else None


def running_rows(ledger: DelegationLedger) -> list[LedgerRow]:
    found = existing_ledger(ledger)
    return found.running_rows() if found else []


def queued_rows(ledger: DelegationLedger) -> list[LedgerRow]:
    """Units waiting to start (the admission queue, or for ``offload worker``), first queued first."""
    found = existing_ledger(ledger)
    return found.queued_rows() if found else []


def pending_rows(ledger: DelegationLedger) -> list[LedgerRow]:
    """Finished rows whose result has not been acknowledged, oldest first."""
    found = existing_ledger(ledger)
    return found.pending_rows() if found else []


def settled_rows(ledger: DelegationLedger, limit: int = 20) -> list[LedgerRow]:
    """Delivered or dropped rows, most recently updated first."""
    found = existing_ledger(ledger)
    return found.settled_rows(limit) if found else []


def unit_counts(ledger: DelegationLedger, since: float | None = None) -> UnitCounts:
    """Units by state and delivery state, now, finished since ``since`` and over the ledger's
    life (aggregate reads: one scan of the rows)."""
    found = existing_ledger(ledger)
    return found.unit_counts(since) if found else UnitCounts()
