"""Conversations on disk: ``$HERMES_HOME/state.db``, so a chat can be resumed.

Owns the file ``state.db``: it opens it in WAL mode (the delegation ledger is a guest in the
same file and never changes the journal mode), keeps the file and its sidecars owner-only
(0o600), and owns four tables: ``sessions``, ``session_messages`` (one JSON message per row,
ordered by ``seq``), ``injected_results`` and ``session_lineage`` (which session a compressed
one continues in), versioned as the ``sessions`` component (``offload.ledger.versions``).

Invariant: a turn is stored whole or not at all. ``append_turn`` writes the turn's messages
and, for a turn that carried background results, one ``injected_results`` row per delegation
id, in ONE transaction. So after a crash between "turn stored" and "delivery claim
completed", the replayed result is recognised (``was_injected``) and only acknowledged,
never injected twice.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from offload.engine.errors import OffloadError
from offload.ledger.sqlite_errors import is_locked
from offload.ledger.sqlite_files import connect, connect_read_only, retry_while_locked, secure_files
from offload.ledger.versions import Component, check_sqlite, migrate_sqlite
from offload.home import state_db_path

logger = logging.getLogger(__name__)

WAL_SWITCH_TIMEOUT_S = 5.0
_WAL_RETRY_S = 0.05
_TITLE_CHARS = 60
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL, model TEXT, title TEXT)",
    "CREATE TABLE IF NOT EXISTS session_messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " role TEXT NOT NULL, message_json TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (session_id, seq))",
    "CREATE TABLE IF NOT EXISTS injected_results (session_id TEXT NOT NULL, delegation_id TEXT NOT NULL,"
    " injected_at REAL NOT NULL, PRIMARY KEY (session_id, delegation_id))",
    # Compression lineage: a session continues in at most one successor (UNIQUE parent).
    "CREATE TABLE IF NOT EXISTS session_lineage (session_id TEXT PRIMARY KEY, parent_session_id TEXT NOT NULL"
    " UNIQUE, reason TEXT NOT NULL, created_at REAL NOT NULL)",
)
_MAX_LINEAGE_HOPS = 1000
_LIST_SESSIONS = ("SELECT s.session_id, s.created_at, s.updated_at, s.model, s.title,"
                  " (SELECT COUNT(*) FROM session_messages m WHERE m.session_id = s.session_id)"
                  " FROM sessions s ORDER BY s.updated_at DESC LIMIT ?")


def _tables(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


# Versioned in the file's offload_schema table (offload.ledger.versions); 1: the four tables.
SESSIONS = Component("sessions", (_tables,))


class SessionStoreError(OffloadError):
    """The session store cannot be used. The message names the file and the fix."""


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    created_at: float
    updated_at: float
    model: str | None
    title: str | None
    message_count: int


def stored_sessions(path: Path | None = None, limit: int = 10) -> list[SessionInfo]:
    """``list_sessions`` without opening the store for writing: a home or ``state.db`` that does
    not exist lists as empty and is not created, and a read-only home lists like any other."""
    path = Path(path) if path is not None else state_db_path()
    if not path.exists():
        return []
    try:
        conn = connect_read_only(path)
        try:
            check_sqlite(conn, SESSIONS, str(path))  # a newer offload's layout is refused, never misread
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='sessions'").fetchone():
                return []
            return [SessionInfo(*row) for row in conn.execute(_LIST_SESSIONS, (limit,)).fetchall()]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SessionStoreError(f"cannot read the session store {path} ({exc})") from exc


def new_session_id() -> str:
    return f"sess_{uuid.uuid4().hex[:12]}"


class SessionStore:
    """Sessions and their messages in ``state.db``. Thread-safe: one connection, one lock."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else state_db_path()
        self._lock = threading.RLock()
        try:
            self._conn = self._open()
        except (sqlite3.Error, OSError) as exc:
            raise SessionStoreError(
                f"cannot open the session store {self.path} ({exc}); check that {self.path.parent} is "
                f"writable, or move a damaged file aside (mv {self.path} {self.path}.bad)") from exc

    def _open(self) -> sqlite3.Connection:
        secure_files(self.path, create_main=True)
        conn = connect(self.path)
        try:
            retry_while_locked(lambda: enable_wal(conn, self.path))
            conn.execute("PRAGMA synchronous=FULL")  # a stored turn must survive a power cut too
            retry_while_locked(lambda: migrate_sqlite(conn, SESSIONS, str(self.path)))
        except BaseException:
            conn.close()
            raise
        secure_files(self.path)  # the -wal and -shm sidecars exist now
        return conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- sessions ----------------------------------------------------------------------------
    def create_session(self, session_id: str | None = None, *, model: str | None = None) -> str:
        session_id = session_id or new_session_id()
        now = time.time()
        with self._transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO sessions (session_id, created_at, updated_at, model)"
                         " VALUES (?, ?, ?, ?)", (session_id, now, now, model))
        return session_id

    def session_exists(self, session_id: str) -> bool:
        with self._lock:
            row = self._conn.execute("SELECT 1 FROM sessions WHERE session_id=?", (session_id,)).fetchone()
        return row is not None

    def list_sessions(self, limit: int = 10) -> list[SessionInfo]:
        """Most recently updated first."""
        with self._lock:
            rows = self._conn.execute(_LIST_SESSIONS, (limit,)).fetchall()
        return [SessionInfo(*row) for row in rows]

    # -- messages ----------------------------------------------------------------------------
    def load_messages(self, session_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute("SELECT message_json FROM session_messages WHERE session_id=? ORDER BY seq",
                                      (session_id,)).fetchall()
        return [json.loads(raw) for (raw,) in rows]

    def append_turn(self, session_id: str, messages: Iterable[dict[str, Any]],
                    injected_delegation_ids: Iterable[str] = ()) -> int:
        """Store one turn's new messages and the results it injected, atomically.

        Returns how many messages were written. The session row is created if missing.
        """
        messages = list(messages)
        now = time.time()
        with self._transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO sessions (session_id, created_at, updated_at) VALUES (?, ?, ?)",
                         (session_id, now, now))
            (last,) = conn.execute("SELECT COALESCE(MAX(seq), -1) FROM session_messages WHERE session_id=?",
                                   (session_id,)).fetchone()
            conn.executemany(
                "INSERT INTO session_messages (session_id, seq, role, message_json, created_at) VALUES (?, ?, ?, ?, ?)",
                [(session_id, last + 1 + i, str(m.get("role") or "?"), json.dumps(m, ensure_ascii=False, default=str),
                  now) for i, m in enumerate(messages)])
            conn.executemany("INSERT OR IGNORE INTO injected_results (session_id, delegation_id, injected_at)"
                             " VALUES (?, ?, ?)", [(session_id, d, now) for d in injected_delegation_ids])
            conn.execute("UPDATE sessions SET updated_at=?, title=COALESCE(title, ?) WHERE session_id=?",
                         (now, _title_of(messages), session_id))
        return len(messages)

    # -- compression lineage ------------------------------------------------------------------
    def continue_session(self, old_session_id: str, messages: Iterable[dict[str, Any]], *,
                         reason: str = "compression", model: str | None = None) -> str:
        """Start the successor of ``old_session_id`` holding ``messages``; returns its id.

        One transaction: the new session, its messages and the lineage row all exist, or none
        does — so a crash right after compression leaves either the old session live, or the
        new one reachable from every id in its lineage.
        """
        new_id = new_session_id()
        messages = list(messages)
        now = time.time()
        with self._transaction() as conn:
            title = conn.execute("SELECT title FROM sessions WHERE session_id=?", (old_session_id,)).fetchone()
            conn.execute("INSERT INTO sessions (session_id, created_at, updated_at, model, title) VALUES (?, ?, ?, ?, ?)",
                         (new_id, now, now, model, title[0] if title else None))
            conn.executemany(
                "INSERT INTO session_messages (session_id, seq, role, message_json, created_at) VALUES (?, ?, ?, ?, ?)",
                [(new_id, i, str(m.get("role") or "?"), json.dumps(m, ensure_ascii=False, default=str), now)
                 for i, m in enumerate(messages)])
            conn.execute("INSERT INTO session_lineage (session_id, parent_session_id, reason, created_at)"
                         " VALUES (?, ?, ?, ?)", (new_id, old_session_id, reason, now))
        return new_id

    def live_tip(self, session_id: str) -> str | None:
        """The live session at the tip of ``session_id``'s compression lineage (itself if never
        compressed), or None when it cannot be resolved: an unknown session, a successor whose
        row is missing, or a cycle. Callers must then leave a result pending, never guess."""
        current, seen = session_id, {session_id}
        with self._lock:
            for _ in range(_MAX_LINEAGE_HOPS):
                row = self._conn.execute("SELECT session_id FROM session_lineage WHERE parent_session_id=?",
                                         (current,)).fetchone()
                if row is None:
                    break
                if row[0] in seen:
                    return None
                current = row[0]
                seen.add(current)
            else:
                return None
            exists = self._conn.execute("SELECT 1 FROM sessions WHERE session_id=?", (current,)).fetchone()
        return current if exists else None

    def lineage(self, session_id: str) -> list[str]:
        """``session_id`` and every session it was compressed out of, newest first."""
        chain = [session_id]
        with self._lock:
            for _ in range(_MAX_LINEAGE_HOPS):
                row = self._conn.execute("SELECT parent_session_id FROM session_lineage WHERE session_id=?",
                                         (chain[-1],)).fetchone()
                if row is None or row[0] in chain:
                    break
                chain.append(row[0])
        return chain

    def was_injected(self, session_id: str, delegation_id: str) -> bool:
        """Whether a stored turn of this session already carries this delegation's result."""
        with self._lock:
            row = self._conn.execute("SELECT 1 FROM injected_results WHERE session_id=? AND delegation_id=?",
                                     (session_id, delegation_id)).fetchone()
        return row is not None


def enable_wal(conn: sqlite3.Connection, path: Path, timeout_s: float = WAL_SWITCH_TIMEOUT_S) -> str:
    """Switch the file to WAL; returns the journal mode in effect.

    Switching from a rollback journal needs the file to itself for a moment. If another
    connection is mid-write, SQLite answers "locked" at once instead of waiting (its busy
    handler would deadlock there), so we retry briefly; if the file stays busy we carry on in
    the current mode (correct, just less concurrent) and the next start switches it.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            break
        except sqlite3.OperationalError as exc:
            if not is_locked(exc):
                raise
            if time.monotonic() >= deadline:  # the caller retries this read while locked
                mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
                break
            time.sleep(_WAL_RETRY_S)
    if mode != "wal":  # still busy, or e.g. a network file system without shared memory
        logger.warning("state.db at %s stays in %s journal mode for now (could not switch to WAL)", path, mode)
    return mode


def _title_of(messages: list[dict[str, Any]]) -> str | None:
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.strip():
            return " ".join(content.split())[:_TITLE_CHARS]
    return None
