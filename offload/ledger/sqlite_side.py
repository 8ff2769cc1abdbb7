"""The SQLite ledger's side tables: control requests, live activity snapshots, the tally of
pruned units and the journal.

- ``async_delegation_controls``: one row per delegation some process asked to stop
  (``offload stop``, the dashboard), with an expiry; the owning process takes (deletes) it and
  interrupts the unit through its engine. Keyed by delegation id, so the requester need not
  know which process owns the unit.
- ``async_delegation_journal``: what happened to a unit beyond its row (stall warnings,
  interrupts, its children's messages and tool calls), appended in batches by the owner loop
  and pruned with the rows (``offload.owner.journal``).
- ``async_delegation_activity``: per running unit, the owner's latest activity snapshot (per
  child API calls, current tool, last activity; the stall clock) and when it was written, so
  processes that do not run the unit can show it.
- ``offload_pruned_units``: the units prune deleted, by state (``offload.ledger.tally``), so
  ``unit_counts`` counts every unit the ledger ever held.

The tables are part of the ledger's schema (migration 4 in ``offload.ledger.migrations``
creates them with the rest, under its version row); reads of a store without them (opened
read-only, before it was migrated) return nothing and never create them. Invariant: a poll by
an owner with nothing requested is one indexed read, never a write.
"""
from __future__ import annotations

import sqlite3
from typing import Any

from offload.ledger.codec import dumps, loads
from offload.ledger.protocol import JournalEntry
from offload.ledger.tally import SQLITE_TALLY, UnitCounts, counts, grouped

SIDE_TABLES = (
    "CREATE TABLE IF NOT EXISTS async_delegation_controls (delegation_id TEXT PRIMARY KEY,"
    " action TEXT NOT NULL, requested_at REAL NOT NULL, expires_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS async_delegation_activity (delegation_id TEXT PRIMARY KEY,"
    " written_at REAL NOT NULL, snapshot_json TEXT NOT NULL)",
    SQLITE_TALLY.create,
    "CREATE TABLE IF NOT EXISTS async_delegation_journal (entry_id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " delegation_id TEXT NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, child INTEGER, data_json TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS idx_async_delegation_journal ON async_delegation_journal(delegation_id, entry_id)",
)
# Journal entries and approval requests whose row is gone (pruned, forgotten): run with the
# prune, in its transaction.
PRUNE_SIDE_RECORDS = tuple(f"DELETE FROM {table} WHERE delegation_id NOT IN (SELECT delegation_id FROM async_delegations)"
                           for table in ("async_delegation_journal", "async_delegation_approvals",
                                         "async_delegation_steps"))

_DELETE_ORPHANS = ("DELETE FROM async_delegation_activity WHERE delegation_id NOT IN"
                   " (SELECT delegation_id FROM async_delegations WHERE state='running')")


def _missing_table(exc: sqlite3.OperationalError) -> bool:
    return "no such table" in str(exc)


def _marks(ids: list[str]) -> str:
    return ",".join("?" * len(ids))


class SqliteSideTables:
    """Mixed into ``SqliteLedger``: uses its ``_write`` (group commit) and ``_use`` (reads)."""

    def request_control(self, delegation_id: str, action: str, now: float, expires_at: float) -> None:
        def write(conn: sqlite3.Connection | None) -> None:
            conn.execute("INSERT OR REPLACE INTO async_delegation_controls VALUES (?,?,?,?)",
                         (delegation_id, action, now, expires_at))
        self._write(write, create=True)

    def withdraw_control(self, delegation_id: str) -> None:
        self._side_delete("async_delegation_controls", [delegation_id])

    def requested_controls(self, now: float) -> list[str]:
        return [r[0] for r in self._side_read(
            "SELECT delegation_id FROM async_delegation_controls WHERE expires_at > ?", (now,))]

    def take_control(self, delegation_ids: list[str], now: float) -> list[tuple[str, str]]:
        requested = self._side_read("SELECT delegation_id, action, expires_at FROM async_delegation_controls", ())
        if not requested:
            return []  # the common case: a read, no write lock
        owned = set(delegation_ids)
        wanted = [(did, action) for did, action, expires_at in requested if did in owned and expires_at > now]

        def write(conn: sqlite3.Connection | None) -> list[tuple[str, str]]:
            if conn is None:
                return []
            conn.execute("DELETE FROM async_delegation_controls WHERE expires_at<=?", (now,))
            # Only what this call deleted is ours: another process may have taken it first.
            return [(did, action) for did, action in wanted if conn.execute(
                "DELETE FROM async_delegation_controls WHERE delegation_id=?", (did,)).rowcount]
        if not wanted and all(expires_at > now for _did, _action, expires_at in requested):
            return []  # requests for other processes' units: theirs to take
        return self._write(write)

    def write_activity(self, snapshots: dict[str, dict[str, Any]], gone: list[str], now: float) -> None:
        def write(conn: sqlite3.Connection | None) -> None:
            if conn is None:
                return  # no ledger file: nothing to describe the units to
            conn.executemany("INSERT OR REPLACE INTO async_delegation_activity VALUES (?,?,?)",
                             [(did, now, dumps(snap)) for did, snap in snapshots.items()])
            if gone:
                conn.execute(f"DELETE FROM async_delegation_activity WHERE delegation_id IN ({_marks(gone)})", gone)
                conn.execute(_DELETE_ORPHANS)
        self._write(write, transaction=True)  # one commit (one sync) for the whole batch

    def read_activity(self, delegation_ids: list[str]) -> dict[str, tuple[float, dict[str, Any]]]:
        if not delegation_ids:
            return {}
        found = self._side_read("SELECT delegation_id, written_at, snapshot_json FROM async_delegation_activity"
                                f" WHERE delegation_id IN ({_marks(delegation_ids)})", tuple(delegation_ids))
        return {did: (written_at, loads(snapshot) or {}) for did, written_at, snapshot in found}

    def unit_counts(self, since: float | None = None) -> UnitCounts:
        with self._use() as conn:
            if conn is None:
                return UnitCounts()
            by_state = conn.execute(*grouped(SQLITE_TALLY, since)).fetchall()
            stops = conn.execute(SQLITE_TALLY.stops_since, (since,)).fetchall() if since is not None else []
        return counts(by_state, self._side_read(SQLITE_TALLY.pruned, ()), stops)

    def append_journal(self, entries: list[JournalEntry]) -> None:
        def write(conn: sqlite3.Connection | None) -> None:
            if conn is None:
                return  # no ledger file: no rows to describe
            conn.executemany("INSERT INTO async_delegation_journal (delegation_id, at, kind, child, data_json)"
                             " VALUES (?,?,?,?,?)",
                             [(e.delegation_id, e.at, e.kind, e.child, dumps(e.data)) for e in entries])
        if entries:
            self._write(write, transaction=True)

    def read_journal(self, delegation_id: str) -> list[JournalEntry]:
        found = self._side_read("SELECT at, kind, child, data_json FROM async_delegation_journal"
                                " WHERE delegation_id=? ORDER BY entry_id", (delegation_id,))
        return [JournalEntry(delegation_id, at, kind, child, loads(data) or {}) for at, kind, child, data in found]

    @staticmethod
    def _prune_side_records(conn: sqlite3.Connection) -> None:
        for statement in PRUNE_SIDE_RECORDS:
            try:
                conn.execute(statement)
            except sqlite3.OperationalError as exc:
                if not _missing_table(exc):
                    raise

    def _side_read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._use() as conn:
            if conn is None:
                return []
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if _missing_table(exc):
                    return []  # a ledger from before these tables: nothing requested, nothing published
                raise

    def _side_delete(self, table: str, ids: list[str]) -> None:
        def write(conn: sqlite3.Connection | None) -> None:
            if conn is None:
                return
            try:
                conn.execute(f"DELETE FROM {table} WHERE delegation_id IN ({_marks(ids)})", ids)
            except sqlite3.OperationalError as exc:
                if not _missing_table(exc):
                    raise
        self._write(write)
