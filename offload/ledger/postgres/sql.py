"""The PostgreSQL ledger's tables and statements as data: no I/O here (the backend is
``postgres/ledger.py``; its connection pool is ``postgres/connections.py``, the owner lease
``postgres/lease.py``, and the delivery statements it shares with SQLite ``delivery_sql.py``).

Two tables in the connection's schema (``search_path``):
- ``async_delegations``: the same columns as the SQLite ledger (times are epoch seconds as
  ``double precision``, JSON is text so a value round-trips byte for byte), plus the owner's
  host id and the fencing token of the lease it held when it dispatched the row;
- ``async_delegation_owners``: one row per live owner lease. ``token`` comes from a sequence,
  so a lease that was revoked (its row deleted by a recovering host) can never come back: a
  terminal write names its token and is refused once that token is gone.

Schema creation and migration (``offload.ledger.migrations``, versioned by
``offload.ledger.versions``) run under a transaction-scoped advisory lock, so processes that
start together never race on ``CREATE``/``ALTER``.
"""
from __future__ import annotations

from typing import Any

from offload.ledger.delivery_sql import POSTGRES, DeliverySql
from offload.ledger.protocol import DispatchRow, LedgerRow
from offload.ledger.sqlite_rows import _COLUMN_NAMES, _decode, _row_values
from offload.ledger.sqlite_rows import _COLUMNS as _SQLITE_COLUMNS

_PG_TYPES = {"TEXT": "text", "REAL": "double precision", "INTEGER": "bigint"}


def _pg_decl(decl: str) -> str:
    kind, _, rest = decl.partition(" ")
    return f"{_PG_TYPES[kind]} {rest}".strip()


_COLUMNS: tuple[tuple[str, str], ...] = (
    *((name, _pg_decl(decl)) for name, decl in _SQLITE_COLUMNS),
    ("owner_host", "text"),
    ("owner_token", "bigint"),
    # The delivery claim holder's host and lease: a claim whose holder's lease is gone is dead.
    ("delivery_claim_host", "text"),
    ("delivery_claim_token", "bigint"),
)
SCHEMA_LOCK_KEY = "offload ledger schema"
# Migrations are additive: every column is (re)declared with ADD COLUMN IF NOT EXISTS, so a
# table made by an older version gains the new columns and nothing is ever dropped.
SCHEMA: tuple[str, ...] = (
    "CREATE SEQUENCE IF NOT EXISTS async_delegation_lease_tokens",
    "CREATE TABLE IF NOT EXISTS async_delegation_owners (token bigint PRIMARY KEY,"
    " host_id text NOT NULL, pid bigint, started_at bigint, expires_at double precision NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS async_delegations ({', '.join(f'{n} {t}' for n, t in _COLUMNS)})",
    *(f"ALTER TABLE async_delegations ADD COLUMN IF NOT EXISTS {n} {t.replace('PRIMARY KEY', '')}"
      for n, t in _COLUMNS[1:]),
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery ON async_delegations(delivery_state, completed_at)",
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_live ON async_delegations(dispatched_at)"
    " WHERE state = 'running'",
)
TABLE_EXISTS = "SELECT to_regclass('async_delegations') IS NOT NULL"
DB_NOW = "extract(epoch from clock_timestamp())"

_ROW_COLUMNS = (*_COLUMN_NAMES, "owner_host", "owner_token", "delivery_claim_host", "delivery_claim_token")
# Whether the owner's lease, and the claim holder's, are live, judged on the database's clock.
SELECT = (f"SELECT {', '.join('d.' + c for c in _ROW_COLUMNS)}, o.token IS NOT NULL AND o.expires_at > {DB_NOW},"
          f" c.token IS NOT NULL AND c.expires_at > {DB_NOW}"
          " FROM async_delegations d LEFT JOIN async_delegation_owners o ON o.token = d.owner_token"
          " LEFT JOIN async_delegation_owners c ON c.token = d.delivery_claim_token")

_WRITE_COLUMNS = (
    "delegation_id", "origin_session", "origin_ui_session_id", "origin_session_id", "parent_session_id",
    "state", "dispatched_at", "completed_at", "updated_at", "task_json", "event_json", "result_json",
    "delivery_state", "delivery_attempts", "owner_pid", "owner_started_at", "owner_host", "owner_token",
)
_INSERT = f"INSERT INTO async_delegations ({', '.join(_WRITE_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_WRITE_COLUMNS))})"
# A dispatch replaces any row of the same id whole, as SQLite's INSERT OR REPLACE does.
INSERT_DISPATCH = _INSERT + " ON CONFLICT (delegation_id) DO UPDATE SET " + ", ".join(
    [f"{c}=excluded.{c}" for c in _WRITE_COLUMNS[1:]]
    + ["delivered_at=NULL", "delivery_claim=NULL", "delivery_claimed_at=NULL", "delivery_progress=0", "drop_reason=NULL"])
SQL = DeliverySql.for_dialect(POSTGRES)  # the statements shared with SQLite
# A write of a running row is fenced: it moves only a row still running under the writer's
# lease token, so an owner whose lease was revoked cannot overwrite the recovered row.
FENCE = " AND owner_token IS NOT DISTINCT FROM %s"
# The terminal write. A row that vanished is written whole again (the same upsert as SQLite's).
UPDATE_COMPLETION = SQL.complete_row + " AND state='running'" + FENCE
SETTLE_ABANDONED = SQL.settle_abandoned + FENCE + " RETURNING origin_session"
# Completing a delivery on replay: the claim may never have reached the server (it was granted
# in memory while the server was down), so a row nobody else has claimed is completed too.
_CLAIMED = " AND delivery_claim=%s"
assert SQL.complete.endswith(_CLAIMED), "the shared complete statement must end in its claim guard"
COMPLETE_REPLAYED = SQL.complete[:-len(_CLAIMED)] + " AND (delivery_claim=%s OR delivery_claim IS NULL)"
INSERT_COMPLETION = _INSERT + " ON CONFLICT (delegation_id) DO NOTHING"
# A claim also records the holder's host and lease token: (claim, now, pid, started_at, host,
# token, delegation_id, now - lease_s).
_HOLDER = "delivery_claim_started_at=%s"
assert _HOLDER in SQL.claim, "the shared claim statement must record its holder"
CLAIM = SQL.claim.replace(_HOLDER, _HOLDER + ", delivery_claim_host=%s, delivery_claim_token=%s")


# SQLite's values end with the owner epoch, which PostgreSQL does not write (its lease token
# fences instead; the column is there, 0, so both layouts stay one).
_NO_EPOCH = -1


def dispatch_values(row: DispatchRow, now: float, host_id: str, token: int | None) -> tuple[Any, ...]:
    return (*_row_values(row, "running", None, now, None, None)[:_NO_EPOCH], host_id, token)


def completion_values(row: DispatchRow, state: str, completed_at: float, now: float, event_json: str,
                      result_json: str, host_id: str, token: int | None) -> tuple[Any, ...]:
    return (*_row_values(row, state, completed_at, now, event_json, result_json)[:_NO_EPOCH], host_id, token)


def decode(values: tuple[Any, ...]) -> LedgerRow:
    """A selected row: the SQLite columns decode as there; the owner's and the claim holder's
    host, token and whether their leases are live go to ``extra``."""
    base = len(_COLUMN_NAMES)
    row = _decode(values[:base])
    owner_host, owner_token, claim_host, claim_token, lease_live, claim_lease_live = values[base:base + 6]
    row.extra = {"owner_host": owner_host, "owner_token": owner_token, "lease_live": bool(lease_live),
                 "claim_host": claim_host, "claim_token": claim_token, "claim_lease_live": bool(claim_lease_live)}
    return row


def notify_channel(schema: str) -> str:
    """The NOTIFY channel of one ledger (one per schema, within PostgreSQL's 63-byte names)."""
    return f"offload_ledger_{schema}"[:63]


def queue_channel(schema: str) -> str:
    """The NOTIFY channel of one ledger's work queue (units queued for ``offload worker``): its
    own, so a settled result wakes no worker and a queued unit no consumer."""
    return f"offload_queue_{schema}"[:63]
