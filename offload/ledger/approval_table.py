"""The ledger's approval requests (``async_delegation_approvals``), one mixin per backend over
the same statements: a subagent's risky terminal command waiting for a person's answer
(``offload.approvals`` owns what they mean).

A request is written ``pending`` by the process that runs the child; any process on the
ledger (``offload approvals``, the chat, the dashboard, a worker on another host) lists the
pending ones and decides one; the waiting child reads its row until it is decided or its
deadline passes. Invariants: a decision is one conditional update (``state='pending'``), so of
two people who answer at once exactly one decides and the other is told; the table is created
by ledger migration 4 (and on first write), and a read of a ledger without it returns nothing.
"""
from __future__ import annotations

import copy
import sqlite3
from typing import Any

from offload.ledger.codec import dumps, loads

PENDING = "pending"
COLUMNS = ("request_id", "delegation_id", "session_key", "child", "command", "categories_json", "reasons_json",
           "requested_at", "expires_at", "state", "decided_by", "decided_at", "owner")
SQLITE_TABLE = (
    "CREATE TABLE IF NOT EXISTS async_delegation_approvals (request_id TEXT PRIMARY KEY, delegation_id TEXT,"
    " session_key TEXT, child INTEGER, command TEXT NOT NULL, categories_json TEXT NOT NULL, reasons_json TEXT"
    " NOT NULL, requested_at REAL NOT NULL, expires_at REAL NOT NULL, state TEXT NOT NULL, decided_by TEXT,"
    " decided_at REAL, owner TEXT)")
POSTGRES_TABLE = (
    "CREATE TABLE IF NOT EXISTS async_delegation_approvals (request_id text PRIMARY KEY, delegation_id text,"
    " session_key text, child integer, command text NOT NULL, categories_json text NOT NULL, reasons_json text"
    " NOT NULL, requested_at double precision NOT NULL, expires_at double precision NOT NULL, state text NOT NULL,"
    " decided_by text, decided_at double precision, owner text)")
INDEX = "CREATE INDEX IF NOT EXISTS idx_async_delegation_approvals ON async_delegation_approvals(state, requested_at)"
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM async_delegation_approvals"


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    row = dict(zip(COLUMNS, values))
    row["categories"] = loads(row.pop("categories_json")) or []
    row["reasons"] = loads(row.pop("reasons_json")) or []
    return row


def _values(request: dict[str, Any]) -> tuple[Any, ...]:
    stored = {**request, "categories_json": dumps(list(request.get("categories") or [])),
              "reasons_json": dumps(list(request.get("reasons") or [])), "state": PENDING}
    return tuple(stored.get(column) for column in COLUMNS)


def _where(request_id: str | None, session_key: str | None, pending_only: bool, mark: str) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for column, value in (("request_id", request_id), ("session_key", session_key)):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if pending_only:
        clauses.append(f"state = '{PENDING}'")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


class SqliteApprovals:
    """Mixed into ``SqliteLedger``: its ``_write`` (group commit) and ``_side_read`` (a read that
    finds nothing in a ledger without the table)."""

    def add_approval(self, request: dict[str, Any]) -> None:
        def write(conn: sqlite3.Connection | None) -> None:
            conn.execute(SQLITE_TABLE)
            conn.execute(f"INSERT INTO async_delegation_approvals ({', '.join(COLUMNS)})"
                         f" VALUES ({','.join('?' * len(COLUMNS))})", _values(request))
        self._write(write, create=True)

    def approvals(self, *, request_id: str | None = None, session_key: str | None = None,
                  pending_only: bool = False) -> list[dict[str, Any]]:
        where, params = _where(request_id, session_key, pending_only, "?")
        found = self._side_read(f"{_SELECT}{where} ORDER BY requested_at", tuple(params))
        return [_row(values) for values in found]

    def decide_approval(self, request_id: str, state: str, by: str, at: float) -> bool:
        def write(conn: sqlite3.Connection | None) -> bool:
            if conn is None:
                return False
            return conn.execute("UPDATE async_delegation_approvals SET state=?, decided_by=?, decided_at=?"
                                " WHERE request_id=? AND state=?", (state, by, at, request_id, PENDING)).rowcount > 0
        return self._write(write)


class PostgresApprovals:
    """Mixed into ``PostgresLedger``: its ``_run`` (pooled connection, one retry)."""

    def add_approval(self, request: dict[str, Any]) -> None:
        def write(conn: Any) -> None:
            conn.execute(f"INSERT INTO async_delegation_approvals ({', '.join(COLUMNS)})"
                         f" VALUES ({','.join(['%s'] * len(COLUMNS))})", _values(request))
        self._run(write, create=True)

    def approvals(self, *, request_id: str | None = None, session_key: str | None = None,
                  pending_only: bool = False) -> list[dict[str, Any]]:
        where, params = _where(request_id, session_key, pending_only, "%s")
        found = self._run(lambda conn: conn.execute(f"{_SELECT}{where} ORDER BY requested_at", params).fetchall(),
                          missing=[])
        return [_row(tuple(values)) for values in found]

    def decide_approval(self, request_id: str, state: str, by: str, at: float) -> bool:
        return self._run(lambda conn: conn.execute(
            "UPDATE async_delegation_approvals SET state=%s, decided_by=%s, decided_at=%s"
            " WHERE request_id=%s AND state=%s", (state, by, at, request_id, PENDING)).rowcount > 0, missing=False)


class MemoryApprovals:
    """Mixed into ``MemoryLedger``: ``self.store.approvals`` under the store's lock."""

    def add_approval(self, request: dict[str, Any]) -> None:
        with self.store.lock:
            self.store.created = True
            self.store.approvals[request["request_id"]] = {**copy.deepcopy(request), "state": PENDING,
                                                           "decided_by": None, "decided_at": None}

    def approvals(self, *, request_id: str | None = None, session_key: str | None = None,
                  pending_only: bool = False) -> list[dict[str, Any]]:
        with self.store.lock:
            rows = [copy.deepcopy(r) for r in self.store.approvals.values()
                    if request_id in (None, r["request_id"]) and session_key in (None, r.get("session_key"))
                    and (not pending_only or r["state"] == PENDING)]
        return sorted(rows, key=lambda r: r["requested_at"])

    def decide_approval(self, request_id: str, state: str, by: str, at: float) -> bool:
        with self.store.lock:
            row = self.store.approvals.get(request_id)
            if row is None or row["state"] != PENDING:
                return False
            row.update(state=state, decided_by=by, decided_at=at)
            return True
