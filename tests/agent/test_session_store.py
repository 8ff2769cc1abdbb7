"""SessionStore: owns state.db (WAL, 0o600), stores whole turns, remembers injected results."""
from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest

from offload.agent.session_store import SessionStore, SessionStoreError
from tools import async_delegation as ad
from offload.home import state_db_path

pytestmark = pytest.mark.timeout(30)


def mode_of(path) -> int:
    return os.stat(path).st_mode & 0o777


def test_opens_state_db_in_wal_mode_with_owner_only_files():
    old_umask = os.umask(0o022)
    try:
        store = SessionStore()
        store.create_session("s1")
    finally:
        os.umask(old_umask)
    path = state_db_path()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for candidate in (path, f"{path}-wal", f"{path}-shm"):
        if os.path.exists(candidate):
            assert mode_of(candidate) == 0o600, candidate
    store.close()


def test_the_delegation_ledger_is_a_guest_and_keeps_the_stores_journal_mode():
    with SessionStore() as store:
        store.create_session("s1")
        conn = ad._connect()  # the ledger's own connection: schema init must not touch the mode
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()


def test_a_resumed_session_gets_its_history_back_in_order():
    with SessionStore() as store:
        sid = store.create_session(model="m")
        store.append_turn(sid, [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "hello"}])
        store.append_turn(sid, [{"role": "user", "content": "again"}, {"role": "assistant", "content": "yes"}])
    with SessionStore() as reopened:
        assert reopened.session_exists(sid)
        assert [m["content"] for m in reopened.load_messages(sid)] == ["sys", "hi", "hello", "again", "yes"]
        [info] = reopened.list_sessions()
        assert (info.session_id, info.title, info.message_count, info.model) == (sid, "hi", 5, "m")


def test_a_turn_and_its_injected_results_are_stored_in_one_transaction():
    with SessionStore() as store:
        store.append_turn("s1", [{"role": "user", "content": "[result]"}], injected_delegation_ids=["deleg_1"])
        assert store.was_injected("s1", "deleg_1")
        assert not store.was_injected("s2", "deleg_1")  # per session
        unserializable_tail = [{"role": "assistant", "content": "ok"}, {"role": None, "content": object()}]
        store.append_turn("s1", unserializable_tail, injected_delegation_ids=["deleg_2"])
        assert store.was_injected("s1", "deleg_2")


def test_a_failed_turn_write_leaves_neither_messages_nor_the_injected_mark(monkeypatch):
    with SessionStore() as store:
        store.append_turn("s1", [{"role": "user", "content": "first"}])
        with pytest.raises(sqlite3.IntegrityError):
            # the same seq twice inside one turn violates the primary key halfway through
            with store._transaction() as conn:
                conn.execute("INSERT INTO injected_results VALUES ('s1', 'deleg_x', 0)")
                conn.execute("INSERT INTO session_messages VALUES ('s1', 0, 'user', '{}', 0)")
        assert not store.was_injected("s1", "deleg_x")
        assert [m["content"] for m in store.load_messages("s1")] == ["first"]


def test_concurrent_turns_from_threads_keep_every_message():
    with SessionStore() as store:
        def writer(n: int) -> None:
            for i in range(20):
                store.append_turn("s1", [{"role": "user", "content": f"{n}-{i}"}])
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(store.load_messages("s1")) == 80


def test_an_unopenable_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "state.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(SessionStoreError, match="move a damaged file aside"):
        SessionStore(bad)


class _BusyThenFine:
    """A connection whose journal-mode switch is refused as "locked" a few times."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.calls = refusals, 0

    def execute(self, sql: str):
        self.calls += 1
        if sql == "PRAGMA journal_mode=WAL" and self.refusals:
            self.refusals -= 1
            raise sqlite3.OperationalError("database is locked")
        mode = "delete" if sql == "PRAGMA journal_mode" else "wal"
        return type("Cursor", (), {"fetchone": lambda self: (mode,)})()


def test_switching_to_wal_retries_while_another_writer_holds_the_file(tmp_path):
    from offload.agent.session_store import enable_wal

    conn = _BusyThenFine(refusals=3)
    assert enable_wal(conn, tmp_path / "state.db") == "wal"
    assert conn.calls == 4


def test_a_file_that_stays_busy_is_used_in_its_current_mode(tmp_path):
    from offload.agent.session_store import enable_wal

    assert enable_wal(_BusyThenFine(refusals=10**6), tmp_path / "state.db", timeout_s=0.1) == "delete"


def test_opening_the_store_while_the_ledger_writes_in_another_thread():
    """The store is often opened after the ledger created state.db in rollback mode."""
    conn = ad._connect()
    try:
        stop = threading.Event()

        def writer() -> None:
            while not stop.is_set():
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO async_delegations (delegation_id, state, dispatched_at,"
                             " updated_at) VALUES ('x', 'running', 0, 0)")
                conn.execute("COMMIT")
                # A breath between commits, as any real writer has: SQLite's locks are not fair,
                # and a writer that never lets go starves every other connection by design.
                time.sleep(0.001)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            for _ in range(5):
                SessionStore().close()
        finally:
            stop.set()
            thread.join()
    finally:
        conn.close()
    with sqlite3.connect(state_db_path()) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
