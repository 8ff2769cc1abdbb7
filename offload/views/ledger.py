"""The ledger as the CLI lists it (``offload agents``, ``inbox``, ``stop``, id prefixes), from any
process, and still readable when ``$HERMES_HOME`` is read-only.

The engine's ledger opens ``state.db`` for writing (schema, WAL). On a read-only home or file
that open fails, yet listing what is there must still work: this view then reopens the file
read-only (``mode=ro``; ``immutable=1`` when SQLite cannot even create its WAL index on a
read-only directory) and says so once. Invariant: nothing here writes, and a missing file
lists as empty without creating one.
"""
from __future__ import annotations

import sqlite3
from typing import Callable, TypeVar

from offload.ledger import DelegationLedger, LedgerError, LedgerRow
from offload.ledger.select import MisconfiguredLedger
from offload.ledger.sqlite import SqliteLedger
from offload.ledger.sqlite_files import connect_read_only

T = TypeVar("T")
READ_ONLY_NOTE = ("note: {home} is read-only, so this is a read-only listing (no crash recovery, nothing "
                  "acknowledged); make it writable to deliver or acknowledge results")


class _ReadOnlySqliteLedger(SqliteLedger):
    """The same queries over a read-only connection; a file without the ledger's table (only
    sessions were ever stored in it) holds no rows, as a file that does not exist."""

    def _connection(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is None:
            self._conn = connect_read_only(self.path)
        return self._conn

    def exists(self) -> bool:
        if not super().exists():
            return False
        with self._lock:
            conn = self._connection(create=False)
            return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                                ("async_delegations",)).fetchone() is not None


class LedgerView:
    def __init__(self, ledger: DelegationLedger, on_read_only: Callable[[str], None] | None = None) -> None:
        if isinstance(ledger, MisconfiguredLedger):  # never list a broken ledger as empty
            raise ledger.error
        self._ledger: DelegationLedger = ledger
        self._on_read_only = on_read_only
        self.read_only = False

    def _read(self, query: Callable[[DelegationLedger], T], empty: T) -> T:
        if not self._ledger.exists():
            return empty
        try:
            return query(self._ledger)
        except LedgerError as exc:
            if exc.kind != "unwritable" or self.read_only or not isinstance(self._ledger, SqliteLedger):
                raise
            self.use_read_only()
            return query(self._ledger) if self._ledger.exists() else empty

    def use_read_only(self) -> None:
        """Switch to the read-only connection (after a write was refused) and say so once."""
        if self.read_only or not isinstance(self._ledger, SqliteLedger):
            return
        self.read_only = True
        self._ledger = _ReadOnlySqliteLedger(self._ledger.path)
        if self._on_read_only is not None:
            self._on_read_only(READ_ONLY_NOTE.format(home=self._ledger.path.parent))

    @property
    def ledger(self) -> DelegationLedger:
        """The ledger read (the read-only one once a write was refused)."""
        return self._ledger

    def running(self) -> list[LedgerRow]:
        return self._read(lambda ledger: ledger.running_rows(), [])

    def queued(self) -> list[LedgerRow]:
        """Units waiting to start, first queued first."""
        return self._read(lambda ledger: ledger.queued_rows(), [])

    def pending(self) -> list[LedgerRow]:
        """Finished rows whose result has not been acknowledged, oldest first."""
        return self._read(lambda ledger: ledger.pending_rows(), [])

    def settled(self, limit: int = 20) -> list[LedgerRow]:
        """Delivered or dropped rows, most recently updated first."""
        return self._read(lambda ledger: ledger.settled_rows(limit), [])

    def get(self, delegation_id: str) -> LedgerRow | None:
        return self._read(lambda ledger: ledger.get(delegation_id), None)

    def activity(self, rows: list[LedgerRow]) -> dict[str, dict]:
        """The activity their owners published for the running ``rows`` (``activity.live_view``)."""
        from offload.owner import activity

        running = [row.delegation_id for row in rows if row.state == "running"]
        return self._read(lambda ledger: activity.remote_views(ledger, running), {})
