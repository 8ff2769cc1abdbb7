"""Schema versions (``offload.ledger.versions``): a store made before versions existed is
migrated on open and keeps every row readable; migrations run once, in one transaction, also
when processes start together; a store a newer offload migrated is refused with both versions
and the fix, on SQLite (ledger and sessions) and on a shared PostgreSQL ledger."""
from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from offload.agent.session_store import SESSIONS, SessionStore
from offload.ledger import DispatchRow, LedgerError
from offload.ledger.migrations import POSTGRES_LEDGER, SQLITE_LEDGER
from offload.ledger.sqlite import SqliteLedger
from offload.ledger.sqlite_files import open_connection
from offload.ledger.versions import Component, SchemaTooNew, migrate_sqlite, sqlite_version
from tests.e2e.conftest import offload

T0 = 1_700_000_000.0
NEWER = SQLITE_LEDGER.version + 1  # a version only a newer offload knows
NEWER_PG = POSTGRES_LEDGER.version + 1  # the same on PostgreSQL (its step 7 is its own)
_DELIVERY_COLUMNS = ("delivery_claim_pid", "delivery_claim_started_at", "delivery_progress", "drop_reason")
# state.db as offload wrote it before schema versions (commit 44c8b85), word for word.
_PREVIOUS_LAYOUT = (
    "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,"
    " model TEXT, title TEXT)",
    "CREATE TABLE session_messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,"
    " message_json TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (session_id, seq))",
    "CREATE TABLE injected_results (session_id TEXT NOT NULL, delegation_id TEXT NOT NULL, injected_at REAL NOT NULL,"
    " PRIMARY KEY (session_id, delegation_id))",
    "CREATE TABLE session_lineage (session_id TEXT PRIMARY KEY, parent_session_id TEXT NOT NULL UNIQUE,"
    " reason TEXT NOT NULL, created_at REAL NOT NULL)",
    "CREATE TABLE async_delegations (delegation_id TEXT PRIMARY KEY, origin_session TEXT NOT NULL DEFAULT '',"
    " origin_ui_session_id TEXT NOT NULL DEFAULT '', origin_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT,"
    " state TEXT NOT NULL, dispatched_at REAL NOT NULL, completed_at REAL, updated_at REAL NOT NULL, task_json TEXT,"
    " event_json TEXT, result_json TEXT, delivery_state TEXT NOT NULL DEFAULT 'pending', delivery_attempts INTEGER"
    " NOT NULL DEFAULT 0, delivered_at REAL, delivery_claim TEXT, delivery_claimed_at REAL, owner_pid INTEGER,"
    " owner_started_at INTEGER)",
    "CREATE INDEX idx_async_delegations_delivery ON async_delegations(delivery_state, completed_at)",
)
_STOPPED = {"type": "async_delegation", "delegation_id": "deleg_stopped", "status": "completed", "is_batch": True,
            "goals": ["a", "b"], "results": [{"task_index": 0, "status": "completed", "summary": "a done"},
                                             {"task_index": 1, "status": "interrupted", "error": "stopped"}]}
_DONE = {"type": "async_delegation", "delegation_id": "deleg_done", "status": "completed", "goal": "g", "summary": "ok"}


def _insert(conn: sqlite3.Connection, delegation_id: str, state: str, event: dict | None, delivery: str) -> None:
    conn.execute("INSERT INTO async_delegations (delegation_id, origin_session, parent_session_id, state,"
                 " dispatched_at, completed_at, updated_at, task_json, event_json, delivery_state) VALUES"
                 " (?, 'agent:main', 'sess_old', ?, ?, ?, ?, ?, ?, ?)",
                 (delegation_id, state, T0, None if state == "running" else T0 + 5, T0 + 5,
                  json.dumps({"goal": "g", "goals": ["a", "b"], "is_batch": bool(event and event.get("is_batch"))}),
                  json.dumps(event) if event else None, delivery))


def make_previous_state_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    for statement in _PREVIOUS_LAYOUT:
        conn.execute(statement)
    conn.execute("INSERT INTO sessions VALUES ('sess_old', ?, ?, 'm', 'hello')", (T0, T0))
    conn.execute("INSERT INTO session_messages VALUES ('sess_old', 0, 'user', ?, ?)",
                 (json.dumps({"role": "user", "content": "hello"}), T0))
    _insert(conn, "deleg_stopped", "completed", _STOPPED, "delivered")
    _insert(conn, "deleg_done", "completed", _DONE, "pending")
    _insert(conn, "deleg_running", "running", None, "pending")
    conn.commit()
    conn.close()


def _versions(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT component, version FROM offload_schema").fetchall())
    finally:
        conn.close()


def test_a_state_db_of_the_previous_layout_is_migrated_and_every_row_stays_readable(tmp_path):
    db = tmp_path / "state.db"
    make_previous_state_db(db)
    with SessionStore(db) as store:
        assert [m["content"] for m in store.load_messages("sess_old")] == ["hello"]
    ledger = SqliteLedger(db)
    try:
        assert ledger.get("deleg_stopped").state == "partial"  # hermes' rule stored "completed"
        assert ledger.get("deleg_stopped").event == _STOPPED  # the event is kept as written
        assert [r.delegation_id for r in ledger.pending_rows()] == ["deleg_done"]
        assert ledger.get("deleg_done").state == "completed"
        assert [r.delegation_id for r in ledger.running_rows()] == ["deleg_running"]
    finally:
        ledger.close()
    assert _versions(db) == {"sessions": SESSIONS.version, "ledger": SQLITE_LEDGER.version} == {"sessions": 1,
                                                                                                 "ledger": 9}


def test_the_cli_lists_a_migrated_row_in_todays_words():
    from offload.home import state_db_path

    make_previous_state_db(state_db_path())
    listed = offload("inbox", "--all", "--json")
    assert listed.returncode == 0, listed
    assert {r["id"]: r["state"] for r in json.loads(listed.stdout)["settled"]} == {"deleg_stopped": "partial"}


def test_a_failed_migration_leaves_the_store_as_it_was(tmp_path):
    conn = sqlite3.connect(tmp_path / "state.db", isolation_level=None)

    def breaks(c: sqlite3.Connection) -> None:
        raise RuntimeError("migration 2 failed")

    component = Component("test", (lambda c: c.execute("CREATE TABLE made_by_step_one (x)"), breaks))
    with pytest.raises(RuntimeError, match="migration 2 failed"):
        migrate_sqlite(conn, component, "state.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "made_by_step_one" not in tables and sqlite_version(conn, "test") == 0 and not conn.in_transaction
    conn.close()


@pytest.mark.timeout(60)
def test_processes_opening_the_previous_layout_together_migrate_it_once(tmp_path):
    db = tmp_path / "state.db"
    make_previous_state_db(db)
    starters, barrier, outcomes = 8, threading.Barrier(8), []

    def start() -> None:
        barrier.wait()
        try:
            conn = open_connection(db)
            outcomes.append(conn.execute("SELECT state FROM async_delegations WHERE delegation_id='deleg_stopped'")
                            .fetchone()[0])
            conn.close()
        except Exception as exc:  # collected: every thread must succeed
            outcomes.append(exc)

    threads = [threading.Thread(target=start) for _ in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes == ["partial"] * starters
    assert _versions(db) == {"ledger": SQLITE_LEDGER.version}


def _open_ledger(db: Path) -> None:
    ledger = SqliteLedger(db)
    ledger.persist_dispatch(DispatchRow("deleg_new", "agent:main", T0, {"goal": "g"}), T0)  # opens: migrates
    ledger.close()


def _bump(db: Path, component: str, version: int) -> None:
    conn = sqlite3.connect(db)
    conn.execute("UPDATE offload_schema SET version=? WHERE component=?", (version, component))
    conn.commit()
    conn.close()


def test_an_older_offload_refuses_a_newer_sqlite_store_and_changes_nothing(tmp_path, monkeypatch):
    db = tmp_path / "state.db"
    make_previous_state_db(db)
    SessionStore(db).close()
    _open_ledger(db)
    _bump(db, "ledger", NEWER)
    ledger = SqliteLedger(db)
    with pytest.raises(SchemaTooNew) as refused:
        ledger.pending_rows()
    ledger.close()
    message = str(refused.value)
    assert isinstance(refused.value, LedgerError) and refused.value.kind == "too_new"
    assert f"{db} holds offload's ledger schema version {NEWER}" in message
    assert f"versions up to {SQLITE_LEDGER.version}" in message
    assert "Upgrade offload here (pip install -U offload)" in message
    assert _versions(db) == {"sessions": 1, "ledger": NEWER}
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    listed = offload("agents")
    assert listed.returncode == 2 and listed.stderr.strip() == f"offload: {message}", listed
    _bump(db, "sessions", 2)
    with pytest.raises(SchemaTooNew, match="sessions schema version 2, but this offload knows versions up to 1"):
        SessionStore(db)


def test_a_read_only_listing_refuses_a_newer_store_too():
    from offload.home import state_db_path
    from tests.e2e.test_storage_errors import offload as offload_maybe_read_only

    db = state_db_path()
    _open_ledger(db)
    _bump(db, "ledger", SQLITE_LEDGER.version + 1)
    listed = offload_maybe_read_only("inbox", read_only=True)  # the read-only view: no migration, the check
    assert listed.returncode == 2 and f"ledger schema version {SQLITE_LEDGER.version + 1}" in listed.stderr, listed


def test_the_engine_refuses_a_unit_it_could_not_record_beside_a_newer_offload():
    from offload.home import state_db_path
    from tools import async_delegation as ad

    _open_ledger(state_db_path())
    _bump(state_db_path(), "ledger", NEWER)
    handle = ad.dispatch_async_delegation(goal="g", context=None, toolsets=None, role="leaf", model="m",
                                          session_key="", runner=lambda: {"status": "completed"},
                                          max_async_children=1)
    assert handle["status"] == "rejected" and f"ledger schema version {NEWER}" in handle["error"], handle
    assert "Upgrade offload here" in handle["error"] and ad.active_count() == 0


# -- PostgreSQL ---------------------------------------------------------------------------------
@pytest.fixture
def pg():
    from tests.postgres_support import FreshSchema

    schema = FreshSchema()
    yield schema
    schema.drop()


def _pg_ledger(url: str):
    from offload.ledger.postgres.ledger import PostgresLedger

    return PostgresLedger(url, host_id="host-a")


def test_a_postgres_ledger_of_the_previous_layout_is_migrated_once(pg):
    import psycopg

    from offload.ledger.postgres.sql import SCHEMA

    with psycopg.connect(pg.url, autocommit=True) as conn:
        for statement in SCHEMA:  # the tables as the previous version made them: no version row...
            conn.execute(statement)
        for column in (*_DELIVERY_COLUMNS, "delivery_claim_host", "delivery_claim_token"):
            conn.execute(f"ALTER TABLE async_delegations DROP COLUMN {column}")  # ...nor these columns
        conn.execute("INSERT INTO async_delegations (delegation_id, state, dispatched_at, completed_at, updated_at,"
                     " event_json, delivery_state) VALUES ('deleg_stopped', 'completed', %s, %s, %s, %s, 'pending')",
                     (T0, T0 + 5, T0 + 5, json.dumps(_STOPPED)))
    ledger = _pg_ledger(pg.url)
    try:
        # The first read migrates a ledger that has tables (it never creates them).
        assert [(r.delegation_id, r.state) for r in ledger.pending_rows()] == [("deleg_stopped", "partial")]
        ledger.persist_dispatch(DispatchRow("deleg_new", "agent:main", T0, {"goal": "g"}), T0)
        assert ledger.get("deleg_stopped").state == "partial"
    finally:
        ledger.close()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT component, version FROM offload_schema").fetchall() == [
            ("ledger", POSTGRES_LEDGER.version)]


def test_an_older_offload_on_a_shared_postgres_ledger_stops_instead_of_writing(pg, tmp_path, monkeypatch):
    import psycopg

    newer = _pg_ledger(pg.url)
    newer.persist_dispatch(DispatchRow("deleg_a", "agent:main", T0, {"goal": "g"}), T0)  # tables at this version
    newer.close()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("UPDATE offload_schema SET version=%s WHERE component='ledger'", (NEWER_PG,))
    older = _pg_ledger(pg.url)
    try:
        with pytest.raises(SchemaTooNew, match=f"ledger schema version {NEWER_PG}, but this offload knows versions up to "
                                                 f"{POSTGRES_LEDGER.version}"):
            older.pending_rows()
        with pytest.raises(SchemaTooNew):
            older.persist_dispatch(DispatchRow("deleg_b", "agent:main", T0, {"goal": "g"}), T0)
    finally:
        older.close()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM offload_schema").fetchall() == [(NEWER_PG,)]
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    for command in (("agents",), ("worker",)):  # a listing, and a worker that would run units on it
        refused = offload(*command, OFFLOAD_LEDGER_URL=pg.url, OFFLOAD_BASE_URL="http://127.0.0.1:9/v1")
        assert refused.returncode == 2 and f"ledger schema version {NEWER_PG}" in refused.stderr, refused
        assert "Upgrade offload here" in refused.stderr and "offload:" in refused.stderr


# -- version 3: the delivery columns (issue 27) ------------------------------------------------


def test_a_version_2_sqlite_ledger_gains_the_delivery_columns_and_keeps_its_rows(tmp_path):
    db = tmp_path / "state.db"
    make_previous_state_db(db)  # the layout version 2 still had: none of the delivery columns
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE offload_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL,"
                 " migrated_at REAL NOT NULL)")
    conn.execute("INSERT INTO offload_schema VALUES ('ledger', 2, ?)", (T0,))
    conn.commit()
    conn.close()

    ledger = SqliteLedger(db)
    try:
        [row] = ledger.pending_rows()
        assert (row.delegation_id, row.delivery_progress, row.drop_reason) == ("deleg_done", 0, None)
        assert ledger.claim_delivery("deleg_done", "cli:1:x", T0 + 10, 300.0, holder=(4242, 7)) is True
        assert ledger.record_progress("deleg_done", "cli:1:x", 2, T0 + 11) is True
        got = ledger.get("deleg_done")
        assert (got.delivery_claim_pid, got.delivery_claim_started_at, got.delivery_progress) == (4242, 7, 2)
    finally:
        ledger.close()
    assert _versions(db)["ledger"] == SQLITE_LEDGER.version


def test_a_version_2_postgres_ledger_is_brought_to_the_current_version_by_a_read(pg):
    import psycopg

    from offload.ledger.postgres.sql import SCHEMA

    with psycopg.connect(pg.url, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
        for column in (*_DELIVERY_COLUMNS, "delivery_claim_host", "delivery_claim_token"):
            conn.execute(f"ALTER TABLE async_delegations DROP COLUMN {column}")  # as version 2 made it
        conn.execute("CREATE TABLE offload_schema (component text PRIMARY KEY, version integer NOT NULL,"
                     " migrated_at double precision NOT NULL)")
        conn.execute("INSERT INTO offload_schema VALUES ('ledger', 2, %s)", (T0,))
        conn.execute("INSERT INTO async_delegations (delegation_id, state, dispatched_at, completed_at, updated_at,"
                     " event_json, delivery_state) VALUES ('deleg_done', 'completed', %s, %s, %s, %s, 'pending')",
                     (T0, T0 + 5, T0 + 5, json.dumps(_DONE)))
    ledger = _pg_ledger(pg.url)
    try:
        [row] = ledger.pending_rows()  # a read: it names the new columns, so it migrates first
        assert (row.delegation_id, row.delivery_progress, row.drop_reason) == ("deleg_done", 0, None)
    finally:
        ledger.close()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM offload_schema").fetchall() == [(POSTGRES_LEDGER.version,)]
