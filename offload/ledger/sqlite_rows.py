"""The ``async_delegations`` table of the SQLite ledger as data: its columns, the statements
that write and read rows, and the conversion between ``LedgerRow``/``DispatchRow`` and SQL
values. No I/O here; the connection and its lock live in ``offload/ledger/sqlite.py``.
"""
from __future__ import annotations

from typing import Any

from offload.ledger.codec import dumps, loads as _loads  # noqa: F401 - part of this module's API
from offload.ledger.codec import decode_row
from offload.ledger.delivery_sql import SQLITE, DeliverySql
from offload.ledger.protocol import DispatchRow, LedgerRow

_COLUMNS: tuple[tuple[str, str], ...] = (
    ("delegation_id", "TEXT PRIMARY KEY"),
    ("origin_session", "TEXT NOT NULL DEFAULT ''"),
    ("origin_ui_session_id", "TEXT NOT NULL DEFAULT ''"),
    ("origin_session_id", "TEXT NOT NULL DEFAULT ''"),
    ("parent_session_id", "TEXT"),
    ("state", "TEXT NOT NULL"),
    ("dispatched_at", "REAL NOT NULL"),
    ("completed_at", "REAL"),
    ("updated_at", "REAL NOT NULL"),
    ("task_json", "TEXT"),
    ("event_json", "TEXT"),
    ("result_json", "TEXT"),
    ("delivery_state", "TEXT NOT NULL DEFAULT 'pending'"),
    ("delivery_attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("delivered_at", "REAL"),
    ("delivery_claim", "TEXT"),
    ("delivery_claimed_at", "REAL"),
    ("owner_pid", "INTEGER"),
    ("owner_started_at", "INTEGER"),
    # Who holds the delivery claim (its pid and start-time fingerprint), so a claim whose holder
    # is known dead is released at once instead of after the claim lease.
    ("delivery_claim_pid", "INTEGER"),
    ("delivery_claim_started_at", "INTEGER"),
    # Parts of a result a consumer has shown (a long message is split): the next attempt
    # resumes after them. Reset when the row gets a (new) terminal event.
    ("delivery_progress", "INTEGER NOT NULL DEFAULT 0"),
    ("drop_reason", "TEXT"),  # why the result was dropped undelivered, for every host to show
    # Bumped on every take-over of a unit (``offload.ledger.owner_epoch``): the writes of its
    # previous owner, alive or not, are refused after it (what the lease is on PostgreSQL).
    ("owner_epoch", "INTEGER NOT NULL DEFAULT 0"),
)
_COLUMN_NAMES = tuple(name for name, _ in _COLUMNS)
_SELECT = f"SELECT {', '.join(_COLUMN_NAMES)} FROM async_delegations"
_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS async_delegations ({', '.join(f'{n} {t}' for n, t in _COLUMNS)})",
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery ON async_delegations(delivery_state, completed_at)",
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_live ON async_delegations(dispatched_at) WHERE state = 'running'",
)
_UPSERT_COLUMNS = (
    "delegation_id", "origin_session", "origin_ui_session_id", "origin_session_id", "parent_session_id",
    "state", "dispatched_at", "completed_at", "updated_at", "task_json", "event_json", "result_json",
    "delivery_state", "delivery_attempts", "owner_pid", "owner_started_at", "owner_epoch",
)
_INSERT_DISPATCH = (
    f"INSERT OR REPLACE INTO async_delegations ({', '.join(_UPSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_UPSERT_COLUMNS))})"
)
# Terminal write. An upsert: if the row vanished (state.db deleted under us) it is written
# whole; if it exists, only the terminal fields move and delivery bookkeeping restarts.
_UPSERT_COMPLETION = _INSERT_DISPATCH.replace("INSERT OR REPLACE", "INSERT") + (
    " ON CONFLICT(delegation_id) DO UPDATE SET state=excluded.state, completed_at=excluded.completed_at,"
    " updated_at=excluded.updated_at, event_json=excluded.event_json, result_json=excluded.result_json,"
    " delivery_state='pending', delivery_claim=NULL, delivery_claimed_at=NULL, delivery_progress=0"
)
SQL = DeliverySql.for_dialect(SQLITE)  # the statements shared with PostgreSQL
# The common case of the terminal write: the same fields, on the row written at dispatch.
_UPDATE_COMPLETION = SQL.complete_row
# Fenced forms (SQLite): only under the writer's owner epoch (``offload.ledger.owner_epoch``).
_UPDATE_COMPLETION_FENCED = SQL.complete_row + " AND owner_epoch=?"
_RUNNING_RESULTS_FENCED = SQL.running_results + " AND owner_epoch=?"


def _row_values(row: DispatchRow, state: str, completed_at: float | None, now: float,
                event_json: str | None, result_json: str | None, epoch: int = 0) -> tuple[Any, ...]:
    return (row.delegation_id, row.origin_session, row.origin_ui_session_id, row.origin_session_id,
            row.parent_session_id, state, row.dispatched_at, completed_at, now, dumps(row.task),
            event_json, result_json, "pending", 0, row.owner_pid, row.owner_started_at, epoch)


def _decode(values: tuple[Any, ...]) -> LedgerRow:
    return decode_row(dict(zip(_COLUMN_NAMES, values)))
