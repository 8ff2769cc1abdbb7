"""What subagents spent (``async_delegation_spend``), one mixin per backend over the same
statements: tokens, the reported cost in USD and the model calls whose cost was not reported,
per UTC day, parent session and -- for the units of one split delegate_task call that run in
different processes -- the call (``offload.subagents.budget`` owns what the figures mean).

The table is in the ledger, so every process on it counts in one place: a worker on another
host charges the session and the day its unit came from, and the dispatcher's per-session and
per-day caps see it. Invariants: a charge is one upsert that adds to its row (two processes
charging at once both count); a read is one statement that sums each asked scope; the table is
created by ledger migration 6 (which also moves the rows of the per-home ``subagent_spend``
table that earlier versions kept in ``state.db``), and a read of a ledger without it returns
zeros.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Sequence

SCOPES = ("session_key", "day", "call_id")  # what a total can be asked for
Totals = tuple[int, float, int]  # tokens, cost_usd, cost_unknown_calls
ZERO: Totals = (0, 0.0, 0)
_MEMORY_KEY = ("day", "session_key", "call_id")  # MemoryStore.spend's key

SQLITE_TABLE = (
    "CREATE TABLE IF NOT EXISTS async_delegation_spend (day TEXT NOT NULL, session_key TEXT NOT NULL,"
    " call_id TEXT NOT NULL DEFAULT '', tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0,"
    " cost_unknown_calls INTEGER NOT NULL DEFAULT 0, updated_at REAL, PRIMARY KEY (day, session_key, call_id))")
POSTGRES_TABLE = (
    "CREATE TABLE IF NOT EXISTS async_delegation_spend (day text NOT NULL, session_key text NOT NULL,"
    " call_id text NOT NULL DEFAULT '', tokens bigint NOT NULL DEFAULT 0, cost_usd double precision NOT NULL"
    " DEFAULT 0, cost_unknown_calls integer NOT NULL DEFAULT 0, updated_at double precision,"
    " PRIMARY KEY (day, session_key, call_id))")
INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_async_delegation_spend_session ON async_delegation_spend(session_key)",
    "CREATE INDEX IF NOT EXISTS idx_async_delegation_spend_call ON async_delegation_spend(call_id)"
    " WHERE call_id <> ''",
)
_COLUMNS = "day, session_key, call_id, tokens, cost_usd, cost_unknown_calls, updated_at"
# what an insert onto an existing row does: it adds
_ACCUMULATE = (" ON CONFLICT (day, session_key, call_id) DO UPDATE SET"
               " tokens = async_delegation_spend.tokens + excluded.tokens,"
               " cost_usd = async_delegation_spend.cost_usd + excluded.cost_usd,"
               " cost_unknown_calls = async_delegation_spend.cost_unknown_calls + excluded.cost_unknown_calls")
_ADD = (f"INSERT INTO async_delegation_spend ({_COLUMNS}) VALUES ({{marks}})" + _ACCUMULATE
        + ", updated_at = excluded.updated_at")
SQLITE_ADD = _ADD.format(marks=",".join("?" * 7))
POSTGRES_ADD = _ADD.format(marks=",".join(["%s"] * 7))
# Rows of the per-home table earlier versions kept in state.db (migration 6 moves them here).
SQLITE_LEGACY_MOVE = ("INSERT INTO async_delegation_spend (day, session_key, call_id, tokens, cost_usd,"
                      " cost_unknown_calls) SELECT day, session_key, '', tokens, {cost}, {unknown} FROM subagent_spend"
                      " WHERE true" + _ACCUMULATE)


def _sums(scopes: Sequence[tuple[str, str]], mark: str) -> tuple[str, list[str]]:
    """One statement summing each ``(scope, value)``: one row per scope, in order."""
    parts, params = [], []
    for k, (scope, value) in enumerate(scopes):
        if scope not in SCOPES:
            raise ValueError(f"spend scope {scope!r}: expected one of {', '.join(SCOPES)}")
        parts.append(f"SELECT {k} AS k, COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_usd), 0),"
                     f" COALESCE(SUM(cost_unknown_calls), 0) FROM async_delegation_spend WHERE {scope} = {mark}")
        params.append(value)
    return " UNION ALL ".join(parts) + " ORDER BY k", params


def _totals(rows: list[Any], n: int) -> list[Totals]:
    return [(int(r[1]), float(r[2]), int(r[3])) for r in rows] if rows else [ZERO] * n


def _clamped(spent: Totals) -> Totals:
    """A charge never takes spend away."""
    tokens, cost_usd, unknown = spent
    return max(tokens, 0), max(cost_usd, 0.0), max(unknown, 0)


def _values(day: str, session_key: str, call_id: str, spent: Totals, at: float) -> tuple[Any, ...]:
    return (day, session_key, call_id, *_clamped(spent), at)


class SqliteSpend:
    """Mixed into ``SqliteLedger``: its ``_write`` (group commit) and ``_side_read`` (a read that
    finds nothing in a ledger without the table)."""

    def add_spend(self, day: str, session_key: str, call_id: str, spent: Totals, at: float) -> None:
        def write(conn: sqlite3.Connection | None) -> None:
            conn.execute(SQLITE_ADD, _values(day, session_key, call_id, spent, at))
        self._write(write, create=True)

    def spend_totals(self, scopes: Sequence[tuple[str, str]]) -> list[Totals]:
        statement, params = _sums(scopes, "?")
        return _totals(self._side_read(statement, tuple(params)), len(scopes))


class PostgresSpend:
    """Mixed into ``PostgresLedger``: its ``_run`` (pooled connection, one retry)."""

    def add_spend(self, day: str, session_key: str, call_id: str, spent: Totals, at: float) -> None:
        self._run(lambda conn: conn.execute(POSTGRES_ADD, _values(day, session_key, call_id, spent, at)), create=True)

    def spend_totals(self, scopes: Sequence[tuple[str, str]]) -> list[Totals]:
        statement, params = _sums(scopes, "%s")
        rows = self._run(lambda conn: conn.execute(statement, params).fetchall(), missing=[])
        return _totals(rows, len(scopes))


class MemorySpend:
    """Mixed into ``MemoryLedger``: ``self.store.spend`` under the store's lock."""

    def add_spend(self, day: str, session_key: str, call_id: str, spent: Totals, at: float) -> None:
        tokens, cost_usd, unknown = _clamped(spent)
        with self.store.lock:
            self.store.created = True
            old = self.store.spend.get((day, session_key, call_id), ZERO)
            self.store.spend[(day, session_key, call_id)] = (old[0] + tokens, old[1] + cost_usd, old[2] + unknown)

    def spend_totals(self, scopes: Sequence[tuple[str, str]]) -> list[Totals]:
        _sums(scopes, "?")  # the same refusal of an unknown scope
        with self.store.lock:
            rows = list(self.store.spend.items())
        out = []
        for scope, value in scopes:
            at = _MEMORY_KEY.index(scope)
            picked = [spent for key, spent in rows if key[at] == value]
            out.append((sum(s[0] for s in picked), sum(s[1] for s in picked), sum(s[2] for s in picked)))
        return out
