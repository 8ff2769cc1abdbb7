"""The ledger's schema migrations, one ``versions.Component`` per backend; a number means the
same step on both (the last may be one backend's only):

1. the tables as they were before versions existed: created, or reconciled by adding the
   columns an older layout lacks (rows untouched);
2. unit states in the words of ``offload.engine.states``: a finished row that hermes' rule
   stored as ``completed`` although a child was interrupted or failed (or ``error`` although
   its children were all interrupted) gets the state its children give (``partial``,
   ``interrupted`` …). Only the ``state`` column changes; the stored event is kept as written.
3. the delivery columns of issue 27: who holds a claim (``delivery_claim_pid``,
   ``delivery_claim_started_at``; on PostgreSQL also ``delivery_claim_host`` and
   ``delivery_claim_token``), the parts of a split result already shown (``delivery_progress``,
   0) and why a result was dropped (``drop_reason``); added empty, rows untouched.
4. the side tables (control requests, activity snapshots, the pruned-unit tally, the journal:
   ``sqlite_side`` / ``postgres.side``) and the history's indexes (``browse.INDEXES``), which
   earlier versions made on first use; created if missing, rows untouched.
5. ``async_delegation_approvals``: subagents' terminal commands waiting for a person's answer
   (``offload.ledger.approval_table``); created empty.
6. ``async_delegation_spend``: what subagents spent per day, session and split call, in the
   ledger so every host counts in one place (``offload.ledger.spend_table``); on SQLite the rows
   of the per-home ``subagent_spend`` table earlier versions kept in ``state.db`` move into it.
7. PostgreSQL only: the functions a unit's dispatch and completion call (``offload_dispatch``,
   ``offload_complete``: ``offload.ledger.postgres.functions``). SQLite stays at 6 (it has no
   such step), so an older offload still opens a home's ``state.db``.
8. ``async_delegation_steps``: background children's durable step logs
   (``offload.ledger.step_table``); created empty. SQLite passes step 7 (nothing to do there) on
   its way, so a number stays one step on both.
9. ``owner_epoch`` on ``async_delegations`` (0 for every row). On SQLite it is bumped by each
   take-over of a unit so the writes of its previous owner are refused
   (``offload.ledger.owner_epoch``); on PostgreSQL it stays 0 (the lease token fences the same
   writes there) and is added so both keep one layout.

Invariant: every step is idempotent and runs inside the migration's one transaction.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Iterable

from offload.engine.states import event_state
from offload.ledger.browse import INDEXES as BROWSE_INDEXES
from offload.ledger.approval_table import INDEX as _APPROVALS_INDEX, POSTGRES_TABLE as _PG_APPROVALS
from offload.ledger.approval_table import SQLITE_TABLE as _SQLITE_APPROVALS
from offload.ledger.protocol import parse_json
from offload.ledger.sqlite_side import SIDE_TABLES as SQLITE_SIDE_TABLES
from offload.ledger import spend_table, step_table
from offload.ledger.sqlite_rows import _COLUMNS as _SQLITE_COLUMNS, _SCHEMA as _SQLITE_SCHEMA
from offload.ledger.versions import Component

_FINISHED = ("SELECT delegation_id, state, event_json FROM async_delegations"
             " WHERE state <> 'running' AND event_json IS NOT NULL")


def restated(rows: Iterable[tuple[str, str, str | None]]) -> list[tuple[str, str]]:
    """``(state, delegation_id)`` for each finished row whose stored state its children contradict."""
    changes = []
    for delegation_id, state, event_json in rows:
        event = parse_json(event_json)
        if isinstance(event, dict) and (new := event_state({**event, "status": state})) != state:
            changes.append((new, delegation_id))
    return changes


# -- SQLite -------------------------------------------------------------------------------------
def _sqlite_tables(conn: sqlite3.Connection) -> None:
    conn.execute(_SQLITE_SCHEMA[0])
    present = {row[1] for row in conn.execute("PRAGMA table_info(async_delegations)")}
    for name, decl in _SQLITE_COLUMNS:
        if name not in present:  # a ledger written by an older version
            conn.execute(f"ALTER TABLE async_delegations ADD COLUMN {name} {decl.replace('PRIMARY KEY', '')}")
    for statement in _SQLITE_SCHEMA[1:]:
        conn.execute(statement)


def _sqlite_states(conn: sqlite3.Connection) -> None:
    conn.executemany("UPDATE async_delegations SET state=? WHERE delegation_id=?",
                     restated(conn.execute(_FINISHED).fetchall()))


def _sqlite_delivery_columns(conn: sqlite3.Connection) -> None:
    _sqlite_tables(conn)  # adds exactly the columns this layout has and the store lacks


def _sqlite_side_tables(conn: sqlite3.Connection) -> None:
    for statement in (*SQLITE_SIDE_TABLES, *BROWSE_INDEXES):
        conn.execute(statement)


def _sqlite_approvals(conn: sqlite3.Connection) -> None:
    conn.execute(_SQLITE_APPROVALS)
    conn.execute(_APPROVALS_INDEX)


def _sqlite_spend(conn: sqlite3.Connection) -> None:
    for statement in (spend_table.SQLITE_TABLE, *spend_table.INDEXES):
        conn.execute(statement)
    legacy = {row[1] for row in conn.execute("PRAGMA table_info(subagent_spend)")}
    if legacy:  # the per-home table of earlier versions (it may predate the cost columns)
        conn.execute(spend_table.SQLITE_LEGACY_MOVE.format(
            cost="cost_usd" if "cost_usd" in legacy else "0",
            unknown="cost_unknown_calls" if "cost_unknown_calls" in legacy else "0"))
        conn.execute("DROP TABLE subagent_spend")


def _sqlite_no_functions(conn: sqlite3.Connection) -> None:
    """Step 7 is PostgreSQL's server-side functions; SQLite has none."""


def _sqlite_steps(conn: sqlite3.Connection) -> None:
    conn.execute(step_table.SQLITE_TABLE)


def _sqlite_owner_epoch(conn: sqlite3.Connection) -> None:
    _sqlite_tables(conn)  # adds exactly the columns this layout has and the store lacks


SQLITE_LEDGER = Component("ledger", (_sqlite_tables, _sqlite_states, _sqlite_delivery_columns, _sqlite_side_tables,
                                     _sqlite_approvals, _sqlite_spend, _sqlite_no_functions, _sqlite_steps,
                                     _sqlite_owner_epoch))


# -- PostgreSQL ---------------------------------------------------------------------------------
def _postgres_tables(conn: Any) -> None:
    from offload.ledger.postgres.sql import SCHEMA

    for statement in SCHEMA:
        conn.execute(statement)


def _postgres_states(conn: Any) -> None:
    changes = restated(conn.execute(_FINISHED).fetchall())
    if changes:
        with conn.cursor() as cur:
            cur.executemany("UPDATE async_delegations SET state=%s WHERE delegation_id=%s", changes)


def _postgres_delivery_columns(conn: Any) -> None:
    _postgres_tables(conn)  # ADD COLUMN IF NOT EXISTS for every column this layout has


def _postgres_side_tables(conn: Any) -> None:
    from offload.ledger.postgres.side import SIDE_TABLES

    for statement in (*SIDE_TABLES, *BROWSE_INDEXES):
        conn.execute(statement)


def _postgres_approvals(conn: Any) -> None:
    conn.execute(_PG_APPROVALS)
    conn.execute(_APPROVALS_INDEX)


def _postgres_spend(conn: Any) -> None:
    for statement in (spend_table.POSTGRES_TABLE, *spend_table.INDEXES):
        conn.execute(statement)


def _postgres_functions(conn: Any) -> None:
    from offload.ledger.postgres.functions import FUNCTIONS

    for statement in FUNCTIONS:
        conn.execute(statement)


def _postgres_steps(conn: Any) -> None:
    conn.execute(step_table.POSTGRES_TABLE)


def _postgres_epoch_column(conn: Any) -> None:
    """The same column (one layout on both), left 0: the lease token fences these writes here."""
    _postgres_tables(conn)  # ADD COLUMN IF NOT EXISTS for every column this layout has


POSTGRES_LEDGER = Component("ledger", (_postgres_tables, _postgres_states, _postgres_delivery_columns,
                                       _postgres_side_tables, _postgres_approvals, _postgres_spend,
                                       _postgres_functions, _postgres_steps, _postgres_epoch_column))
