"""Schema version 4: the side tables (control requests, activity, the pruned tally, the journal)
and the history's indexes are part of the versioned ledger schema. A version-3 store gains
them on open with its rows kept; a fresh store has them from its first write; a store a newer
offload migrated is refused by the journal and the history like by every other read, and is
left as it was -- on SQLite and on PostgreSQL."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from offload.ledger import DispatchRow
from offload.ledger.browse import Browse
from offload.ledger.migrations import POSTGRES_LEDGER, SQLITE_LEDGER
from offload.ledger.protocol import JournalEntry
from offload.ledger.sqlite import SqliteLedger
from offload.ledger.versions import SchemaTooNew
from tests.ledger.test_schema_versions import T0, _bump, _open_ledger, _pg_ledger, _versions, make_previous_state_db
from tests.ledger.test_schema_versions import pg  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(60)
SIDE = {"async_delegation_controls", "async_delegation_activity", "async_delegation_journal", "offload_pruned_units"}
INDEXES = {"idx_async_delegations_browse", "idx_async_delegations_finished", "idx_async_delegations_queued",
           "idx_async_delegation_journal"}


def _sqlite_names(db: Path, kind: str) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type=?", (kind,))}
    finally:
        conn.close()


def _at_version_3(db: Path) -> None:
    """The store as offload 3 left it: the delegation table, a version row, no side table."""
    make_previous_state_db(db)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE offload_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL,"
                 " migrated_at REAL NOT NULL)")
    conn.execute("INSERT INTO offload_schema VALUES ('ledger', 3, ?)", (T0,))
    for column in ("delivery_claim_pid INTEGER", "delivery_claim_started_at INTEGER",
                   "delivery_progress INTEGER NOT NULL DEFAULT 0", "drop_reason TEXT"):
        conn.execute(f"ALTER TABLE async_delegations ADD COLUMN {column}")
    conn.commit()
    conn.close()


def test_a_version_3_sqlite_store_gains_the_side_tables_and_indexes_on_open_and_keeps_its_rows(tmp_path):
    db = tmp_path / "state.db"
    _at_version_3(db)
    assert not SIDE & _sqlite_names(db, "table")
    ledger = SqliteLedger(db)
    try:
        assert {r.delegation_id for r in ledger.browse(Browse())} == {"deleg_stopped", "deleg_done", "deleg_running"}
        assert ledger.get("deleg_done").state == "completed"
        ledger.append_journal([JournalEntry("deleg_running", T0 + 1, "stall_warning", None, {"idle_s": 60})])
        assert [e.kind for e in ledger.read_journal("deleg_running")] == ["stall_warning"]
    finally:
        ledger.close()
    assert SIDE <= _sqlite_names(db, "table") and INDEXES <= _sqlite_names(db, "index")
    assert _versions(db)["ledger"] == SQLITE_LEDGER.version >= 4


def test_a_fresh_sqlite_store_has_the_side_tables_from_its_first_write(tmp_path):
    db = tmp_path / "state.db"
    _open_ledger(db)
    assert SIDE <= _sqlite_names(db, "table") and INDEXES <= _sqlite_names(db, "index")


def test_the_journal_and_the_history_refuse_a_newer_sqlite_store_and_change_nothing(tmp_path):
    db = tmp_path / "state.db"
    _open_ledger(db)
    _bump(db, "ledger", SQLITE_LEDGER.version + 1)
    before = _sqlite_names(db, "table") | _sqlite_names(db, "index")
    for read in (lambda lg: lg.read_journal("deleg_new"), lambda lg: lg.browse(Browse()),
                 lambda lg: lg.append_journal([JournalEntry("deleg_new", T0, "interrupt")])):
        ledger = SqliteLedger(db)
        with pytest.raises(SchemaTooNew, match=f"ledger schema version {SQLITE_LEDGER.version + 1}"):
            read(ledger)
        ledger.close()
    assert _sqlite_names(db, "table") | _sqlite_names(db, "index") == before
    assert _versions(db)["ledger"] == SQLITE_LEDGER.version + 1


def _pg_names(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid=c.relnamespace"
                                           " WHERE n.nspname = current_schema()")}


def test_a_version_3_postgres_ledger_gains_them_on_its_first_read(pg):
    import psycopg

    from offload.ledger.postgres.sql import SCHEMA

    with psycopg.connect(pg.url, autocommit=True) as conn:
        for statement in SCHEMA:  # the tables version 3 made; no side table, no history index
            conn.execute(statement)
        conn.execute("CREATE TABLE offload_schema (component text PRIMARY KEY, version integer NOT NULL,"
                     " migrated_at double precision NOT NULL)")
        conn.execute("INSERT INTO offload_schema VALUES ('ledger', 3, %s)", (T0,))
        conn.execute("INSERT INTO async_delegations (delegation_id, state, dispatched_at, updated_at, delivery_state)"
                     " VALUES ('deleg_a', 'running', %s, %s, 'pending')", (T0, T0))
    assert not (SIDE | INDEXES) & _pg_names(pg.url)
    ledger = _pg_ledger(pg.url)
    try:
        assert [r.delegation_id for r in ledger.browse(Browse())] == ["deleg_a"]  # a read: it migrates first
        assert (SIDE | INDEXES) <= _pg_names(pg.url)
        ledger.append_journal([JournalEntry("deleg_a", T0 + 1, "interrupt")])
        assert [e.kind for e in ledger.read_journal("deleg_a")] == ["interrupt"]
    finally:
        ledger.close()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM offload_schema").fetchall() == [(POSTGRES_LEDGER.version,)]


def test_a_journal_write_makes_a_fresh_postgres_ledger_whole(pg):
    ledger = _pg_ledger(pg.url)
    try:
        ledger.append_journal([JournalEntry("deleg_a", T0, "interrupt")])  # the first use of the schema
        assert [e.kind for e in ledger.read_journal("deleg_a")] == ["interrupt"]
    finally:
        ledger.close()
    assert (SIDE | INDEXES | {"async_delegations"}) <= _pg_names(pg.url)


def test_the_journal_and_the_history_refuse_a_newer_postgres_ledger(pg):
    import psycopg

    ledger = _pg_ledger(pg.url)
    ledger.persist_dispatch(DispatchRow("deleg_a", "agent:main", T0, {"goal": "g"}), T0)
    ledger.close()
    newer = POSTGRES_LEDGER.version + 1
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("UPDATE offload_schema SET version=%s WHERE component='ledger'", (newer,))
    for use in (lambda lg: lg.read_journal("deleg_a"), lambda lg: lg.browse(Browse()),
                lambda lg: lg.append_journal([JournalEntry("deleg_a", T0, "interrupt")])):
        older = _pg_ledger(pg.url)
        try:
            with pytest.raises(SchemaTooNew, match=f"ledger schema version {newer}"):
                use(older)
        finally:
            older.close()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM async_delegation_journal").fetchone() == (0,)
