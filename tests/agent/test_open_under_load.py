"""Opening state.db never fails because another thread or process of ours is writing.

The situation a user is in whenever a background child finishes while ``offload chat
--resume`` starts: the ledger (a guest in state.db) writes from worker threads and other
processes while the session store opens the file and switches it to WAL — and the reverse,
a ledger opening while chats store turns. Both cores are kept busy by the writers.
"""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from offload.agent.session_store import SessionStore
from offload.ledger import sqlite_files as sq
from offload.ledger.sqlite_errors import is_locked
from offload.home import state_db_path

pytestmark = pytest.mark.timeout(180)

WRITER_THREADS = 8
WRITER_PROCESSES = 2
OPENS = 200
# Writers commit back to back with a 1 ms breath: busier than any real ledger, but SQLite's
# locks are not fair, so zero-gap writers would starve any other connection (a reader or
# another writer alike) regardless of what we do at open.
WRITER_GAP_S = 0.001

# A writer process: commits in a loop until its stdin closes (or 120 s pass).
_PROCESS_WRITER = """
import sqlite3, sys, threading, time
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
conn = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
print("writing", flush=True)
deadline = time.monotonic() + 120
i = 0
while not done.is_set() and time.monotonic() < deadline:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:  # "locked" at once during the journal-mode switch
        time.sleep(0.01)
        continue
    conn.execute(sys.argv[2], (f"p{sys.argv[3]}-{i % 50}",))
    conn.execute("COMMIT")
    i += 1
    time.sleep(0.001)
"""

LEDGER_WRITE = ("INSERT OR REPLACE INTO async_delegations (delegation_id, state, dispatched_at, updated_at)"
                " VALUES (?, 'running', 0, 0)")
SESSION_WRITE = "INSERT OR REPLACE INTO sessions (session_id, created_at, updated_at) VALUES (?, 0, 0)"


def _thread_writer(path: Path, statement: str, name: str, stop: threading.Event, errors: list) -> None:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    i = 0
    def write() -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(statement, (f"{name}-{i % 50}",))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    try:
        while not stop.is_set():
            try:
                write()
            except sqlite3.OperationalError as exc:  # the load generator waits its turn too
                if not is_locked(exc):
                    raise
            i += 1
            time.sleep(WRITER_GAP_S)
    except Exception as exc:  # a writer failing would make the test pass for the wrong reason
        errors.append(exc)
    finally:
        conn.close()


@contextmanager
def _under_load(path: Path, statement: str) -> Iterator[None]:
    stop, errors = threading.Event(), []
    threads = [threading.Thread(target=_thread_writer, args=(path, statement, f"t{n}", stop, errors))
               for n in range(WRITER_THREADS)]
    processes = [subprocess.Popen([sys.executable, "-c", _PROCESS_WRITER, str(path), statement, str(n)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for n in range(WRITER_PROCESSES)]
    try:
        for process in processes:
            assert process.stdout.readline().strip() == "writing"
        for thread in threads:
            thread.start()
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for process in processes:
            process.stdin.close()
            assert process.wait(30) == 0
    assert not errors


def _open_many(open_once: Callable[[], None]) -> None:
    for _ in range(OPENS):
        open_once()


def test_the_session_store_opens_while_threads_and_processes_write_to_the_ledger():
    path = state_db_path()
    sq.open_connection(path).close()  # the ledger created state.db first, in rollback mode
    with _under_load(path, LEDGER_WRITE):
        _open_many(lambda: SessionStore().close())
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert check.execute("SELECT COUNT(*) FROM async_delegations").fetchone()[0] > 0  # the load was real


def test_the_ledger_opens_while_threads_and_processes_store_turns():
    path = state_db_path()
    SessionStore().close()
    with _under_load(path, SESSION_WRITE):
        _open_many(lambda: sq.open_connection(path).close())
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] > 0


def _locked_then(result: object, failures: int) -> Callable[..., object]:
    calls = []

    def step(*_args: object) -> object:
        calls.append(1)
        if len(calls) <= failures:
            raise sqlite3.OperationalError("database is locked")
        return result
    return step


def test_a_locked_answer_at_the_journal_mode_step_is_retried_not_fatal(monkeypatch):
    """The failure users met: the WAL switch step raised "database is locked" and the chat refused to open."""
    import offload.agent.session_store as store_module

    real_enable_wal = store_module.enable_wal
    flaky = _locked_then(None, failures=3)
    monkeypatch.setattr(store_module, "enable_wal", lambda conn, path: flaky() or real_enable_wal(conn, path))
    SessionStore().close()
    with sqlite3.connect(state_db_path()) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_retry_while_locked_waits_out_locks_but_not_other_errors_nor_past_its_deadline():
    assert sq.retry_while_locked(_locked_then("opened", failures=2)) == "opened"
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sq.retry_while_locked(_locked_then("opened", failures=1000), timeout_s=0.1)
    damaged_calls = []

    def damaged() -> None:
        damaged_calls.append(1)
        raise sqlite3.DatabaseError("database disk image is malformed")
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        sq.retry_while_locked(damaged)
    assert len(damaged_calls) == 1  # damage is reported at once, never waited on
