"""SQLite specifics of the ledger: journal mode, file modes, schema reconciliation, and how
each kind of failure (corrupt, locked, unwritable, full, vanished file) surfaces.

Every failure must come out as a ``LedgerError`` whose ``kind`` drives one log line per kind
and whose message names the file and the fix, and must never cost the user data.
"""
from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

import offload.ledger.sqlite as sqlite_backend
import offload.ledger.sqlite_files as sqlite_files
from offload.ledger import DispatchRow, LedgerError
from offload.ledger.sqlite import SqliteLedger
from offload.ledger.sqlite_files import initialize_schema, open_connection

T0 = 1_000_000.0


def row(delegation_id: str = "deleg_0001", **overrides) -> DispatchRow:
    fields = dict(delegation_id=delegation_id, origin_session="agent:main:cli", dispatched_at=T0,
                  task={"goal": "g", "is_batch": False}, origin_ui_session_id="ui", origin_session_id="api",
                  parent_session_id="parent", owner_pid=4242, owner_started_at=99)
    fields.update(overrides)
    return DispatchRow(**fields)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def journal_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path) -> Path:
    home = tmp_path / "ledger-home"
    home.mkdir()
    return home / "state.db"


@pytest.fixture
def ledger(db):
    instance = SqliteLedger(db)
    yield instance
    instance.close()


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


# -- journal mode: the session store owns it ---------------------------------------------------------
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_initialize_schema_keeps_the_existing_journal_mode(db, journal):
    owner = sqlite3.connect(db)
    owner.execute(f"PRAGMA journal_mode={journal}")
    owner.execute("CREATE TABLE sessions (id TEXT)")
    owner.commit()
    owner.close()

    guest = sqlite3.connect(db)
    initialize_schema(guest)
    guest.close()

    assert journal_mode(db) == journal


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_ledger_writes_keep_the_existing_journal_mode(db, ledger, journal):
    owner = sqlite3.connect(db)
    owner.execute(f"PRAGMA journal_mode={journal}")
    owner.close()

    ledger.persist_dispatch(row(), T0)
    ledger.persist_completion(row(), {"status": "completed"}, {}, T0 + 1)
    ledger.close()

    assert journal_mode(db) == journal


def test_a_new_ledger_uses_sqlite_default_journal_mode(db, ledger):
    ledger.persist_dispatch(row(), T0)
    ledger.close()
    assert journal_mode(db) == "delete"


# -- file modes ---------------------------------------------------------------------------------------
def test_open_connection_creates_the_database_owner_only_under_umask_022(tmp_path, umask_022):
    db = tmp_path / "home" / "state.db"

    conn = open_connection(db)
    conn.close()

    assert mode(db) == 0o600
    assert stat.S_IMODE(os.stat(db.parent).st_mode) & 0o077 == 0  # a home it creates is private too


def test_wal_sidecars_end_owner_only(db, umask_022):
    conn = open_connection(db)
    conn.execute("PRAGMA journal_mode=wal")  # as the session store would
    ledger = SqliteLedger(db)
    ledger.persist_dispatch(row(), T0)
    ledger.persist_completion(row(), {"status": "completed"}, {}, T0 + 1)

    sidecars = [Path(f"{db}-wal"), Path(f"{db}-shm")]
    assert all(p.exists() for p in sidecars)
    assert [mode(p) for p in (db, *sidecars)] == [0o600, 0o600, 0o600]
    ledger.close()
    conn.close()


def test_opening_tightens_a_database_and_sidecars_another_writer_left_world_readable(db, umask_022):
    holder = sqlite3.connect(db)  # plays the session store: creates state.db 0o644 in WAL mode
    holder.execute("PRAGMA journal_mode=wal")
    holder.execute("CREATE TABLE sessions (id TEXT)")
    holder.execute("INSERT INTO sessions VALUES ('s')")
    holder.commit()
    sidecars = [Path(f"{db}-wal"), Path(f"{db}-shm")]
    assert [mode(p) for p in (db, *sidecars)] == [0o644, 0o644, 0o644]

    conn = open_connection(db)

    assert [mode(p) for p in (db, *sidecars)] == [0o600, 0o600, 0o600]
    conn.close()
    holder.close()


# -- schema --------------------------------------------------------------------------------------------
_OLD_TABLE = (  # the first released ledger: no owner, claim or task columns yet
    "CREATE TABLE async_delegations (delegation_id TEXT PRIMARY KEY, origin_session TEXT NOT NULL,"
    " origin_ui_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT, state TEXT NOT NULL,"
    " dispatched_at REAL NOT NULL, completed_at REAL, updated_at REAL NOT NULL, event_json TEXT,"
    " result_json TEXT, delivery_state TEXT NOT NULL DEFAULT 'pending',"
    " delivery_attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL)"
)


def make_old_table(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute(_OLD_TABLE)
    conn.execute("INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at, completed_at,"
                 " updated_at, event_json, result_json) VALUES ('deleg_old', 'sess', 'completed', ?, ?, ?, ?, ?)",
                 (T0, T0 + 5, T0 + 5, '{"status": "completed", "delegation_id": "deleg_old"}', '{"status": "completed"}'))
    conn.commit()
    conn.close()


def test_an_old_table_missing_columns_is_reconciled_and_keeps_its_rows(db, ledger):
    make_old_table(db)

    old = ledger.get("deleg_old")

    assert old is not None
    assert (old.state, old.event["status"], old.result) == ("completed", "completed", {"status": "completed"})
    assert (old.origin_session_id, old.owner_pid, old.delivery_claim, old.task) == ("", None, None, None)
    conn = sqlite3.connect(db)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(async_delegations)")}
    indexes = {r[1] for r in conn.execute("PRAGMA index_list(async_delegations)")}
    conn.close()
    assert set(sqlite_backend._COLUMN_NAMES) <= columns
    assert "idx_async_delegations_delivery" in indexes
    # The reconciled table takes every operation.
    assert ledger.claim_delivery("deleg_old", "A", T0 + 10, 300) is True
    assert ledger.complete_delivery("deleg_old", "A", T0 + 11) is True
    ledger.persist_dispatch(row("deleg_new"), T0 + 12)
    assert ledger.get("deleg_new").owner_pid == 4242


@pytest.mark.timeout(30)
def test_processes_starting_together_on_an_old_table_all_reconcile_it(db):
    # Each process opens its own connection and adds the missing columns. Without a write
    # lock around "read table_info, ALTER", all but one died with "duplicate column name".
    make_old_table(db)
    starters = 8
    barrier = threading.Barrier(starters)
    outcomes: list = [None] * starters

    def start(i: int) -> None:
        instance = SqliteLedger(db)
        barrier.wait()
        try:
            outcomes[i] = instance.get("deleg_old").state
        except Exception as exc:
            outcomes[i] = exc
        finally:
            instance.close()

    threads = [threading.Thread(target=start, args=(i,)) for i in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes == ["completed"] * starters


def test_defer_floors_attempts_at_zero(db, ledger):
    ledger.persist_dispatch(row(), T0)
    ledger.persist_completion(row(), {"status": "completed"}, {}, T0 + 1)
    ledger.claim_delivery("deleg_0001", "A", T0 + 2, 300)
    raw = sqlite3.connect(db)  # a row claimed before attempts were counted (older ledger)
    raw.execute("UPDATE async_delegations SET delivery_attempts=0")
    raw.commit()
    raw.close()

    assert ledger.defer_delivery("deleg_0001", "A", T0 + 3) is True
    assert ledger.get("deleg_0001").delivery_attempts == 0


# -- failures -----------------------------------------------------------------------------------------
def test_a_corrupt_file_is_reported_with_the_path_and_the_fix_and_left_untouched(db, ledger):
    garbage = bytes(range(256)) * 32
    db.write_bytes(garbage)

    for attempt in (lambda: ledger.pending_rows(), lambda: ledger.persist_dispatch(row(), T0),
                    lambda: ledger.claim_delivery("deleg_0001", "A", T0, 300)):
        with pytest.raises(LedgerError) as info:
            attempt()
        assert info.value.kind == "corrupt"
        assert str(db) in str(info.value)
        assert "mv" in str(info.value)

    assert db.read_bytes() == garbage  # nothing overwritten: the user can still try to salvage it
    assert sorted(p.name for p in db.parent.iterdir()) == ["state.db"]


def test_the_corrupt_hint_is_a_command_that_works_for_a_path_with_spaces(tmp_path):
    db = tmp_path / "Application Support" / "state.db"
    db.parent.mkdir()
    db.write_bytes(b"\x00garbage" * 512)

    with pytest.raises(LedgerError) as info:
        SqliteLedger(db).get("deleg_0001")

    assert info.value.kind == "corrupt"
    assert f"mv '{db}' '{db}.corrupt'" in str(info.value)


@pytest.mark.timeout(30)
def test_a_database_held_by_another_writer_is_locked(db, monkeypatch):
    setup = SqliteLedger(db)
    setup.persist_dispatch(row(), T0)
    setup.close()
    monkeypatch.setattr(sqlite_files, "BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    ledger = SqliteLedger(db)
    try:
        for attempt in (lambda: ledger.get("deleg_0001"),
                        lambda: ledger.claim_delivery("deleg_0001", "A", T0, 300),
                        lambda: ledger.record_unit_child("deleg_0001", {"task_index": 0}, T0)):
            with pytest.raises(LedgerError) as info:
                attempt()
            assert info.value.kind == "locked"
            assert str(db) in str(info.value)
            assert "0.2 s" in str(info.value)  # the wait it actually gave up after
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    assert ledger.get("deleg_0001").state == "running"  # usable again once the lock is gone
    ledger.close()


def test_a_home_under_a_regular_file_is_unwritable(tmp_path):
    # "fullstack" is a file, not a directory. The name also pins that the kind comes from the
    # error, not from words that happen to appear in the user's path.
    (tmp_path / "fullstack").write_text("not a directory")
    db = tmp_path / "fullstack" / "hermes" / "state.db"
    ledger = SqliteLedger(db)

    with pytest.raises(LedgerError) as info:
        ledger.persist_dispatch(row(), T0)

    assert info.value.kind == "unwritable"
    assert str(db) in str(info.value)
    assert ledger.exists() is False


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores directory permissions; the regular-file parent case covers unwritable")
def test_a_read_only_home_is_unwritable(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o500)
    try:
        with pytest.raises(LedgerError) as info:
            SqliteLedger(home / "state.db").persist_dispatch(row(), T0)
    finally:
        home.chmod(0o700)
    assert info.value.kind == "unwritable"


@pytest.mark.parametrize("word", ["locked", "busy", "corrupt", "full", "malformed"])
def test_the_kind_of_an_os_error_does_not_depend_on_words_in_the_path(tmp_path, word):
    path = tmp_path / f"{word}-home" / "state.db"
    err = sqlite_files.classify_error(path, PermissionError(13, "Permission denied", str(path)))
    assert err.kind == "unwritable"


def test_a_full_database_is_reported_as_full(db, monkeypatch):
    ledger = SqliteLedger(db)
    ledger.persist_dispatch(row(), T0)
    ledger.close()
    real_initialize = sqlite_files.initialize_schema

    def capped(conn: sqlite3.Connection) -> None:
        real_initialize(conn)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={pages}")  # no room to grow

    monkeypatch.setattr(sqlite_files, "initialize_schema", capped)
    ledger = SqliteLedger(db)
    big = {"status": "completed", "summary": "x" * 200_000}

    with pytest.raises(LedgerError) as info:
        ledger.persist_completion(row(), big, big, T0 + 1)

    assert info.value.kind == "full"
    assert str(db) in str(info.value)
    assert ledger.get("deleg_0001").state == "running"  # the failed write left the row intact
    ledger.close()


# -- a state.db that vanishes or does not exist ----------------------------------------------------
def test_a_deleted_state_db_is_reopened_and_the_completion_writes_the_whole_row(db, ledger):
    dispatched = row(task={"goal": "g", "goals": ["a", "b"], "is_batch": True})
    ledger.persist_dispatch(dispatched, T0)
    ledger.record_unit_child("deleg_0001", {"task_index": 0, "status": "completed"}, T0 + 1)
    db.unlink()

    assert ledger.record_unit_child("deleg_0001", {"task_index": 1}, T0 + 2) is False
    assert not db.exists()  # a best-effort child record does not resurrect the file
    event = {"type": "async_delegation", "delegation_id": "deleg_0001", "status": "completed",
             "completed_at": T0 + 3}
    ledger.persist_completion(dispatched, event, {"results": []}, T0 + 3)

    assert db.exists() and mode(db) == 0o600
    fresh = SqliteLedger(db)
    got = fresh.get("deleg_0001")
    fresh.close()
    assert (got.state, got.event, got.result) == ("completed", event, {"results": []})
    assert (got.origin_session, got.origin_ui_session_id, got.origin_session_id, got.parent_session_id) == (
        "agent:main:cli", "ui", "api", "parent")
    assert (got.dispatched_at, got.task, got.owner_pid, got.owner_started_at) == (T0, dispatched.task, 4242, 99)
    assert got.delivery_state == "pending"


def test_a_replaced_state_db_is_noticed(db, ledger):
    ledger.persist_dispatch(row("deleg_first"), T0)
    replacement = db.with_name("other.db")
    other = SqliteLedger(replacement)
    other.persist_dispatch(row("deleg_second"), T0)
    other.close()
    os.replace(replacement, db)

    assert ledger.get("deleg_first") is None
    assert ledger.get("deleg_second") is not None


def test_without_a_state_db_reads_answer_empty_and_create_nothing(tmp_path):
    home = tmp_path / "absent-home"
    ledger = SqliteLedger(home / "state.db")

    assert ledger.exists() is False
    assert ledger.get("deleg_0001") is None
    assert ledger.running_rows() == []
    assert ledger.pending_rows() == []
    assert ledger.claim_delivery("deleg_0001", "A", T0, 300) is None
    assert ledger.complete_delivery("deleg_0001", "A", T0) is False
    assert ledger.release_delivery("deleg_0001", "A", T0, 8) == ""
    assert ledger.defer_delivery("deleg_0001", "A", T0) is False
    assert ledger.drop_delivery("deleg_0001", None, T0) is False
    assert ledger.mark_delivered("deleg_0001", T0) is False
    assert ledger.settle_abandoned("deleg_0001", {}, {}, T0) is False
    assert ledger.record_unit_child("deleg_0001", {"task_index": 0}, T0) is False
    assert ledger.prune(T0, 0, 0) == 0
    ledger.forget("deleg_0001")
    ledger.close()

    assert not home.exists()


def test_without_a_state_db_in_an_existing_home_nothing_is_created(db):
    ledger = SqliteLedger(db)
    assert ledger.pending_rows() == [] and ledger.get("x") is None
    assert list(db.parent.iterdir()) == []
