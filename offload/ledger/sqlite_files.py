"""Opening ``state.db``: connections, owner-only file modes, the schema check, waiting out locks,
and turning raw sqlite/OS errors into ``LedgerError``s that name the file and the fix.

Shared by the ledger (``offload.ledger.sqlite``) and the session store, which are guests in the
same file. Invariant: nothing here sets ``journal_mode`` (the session store owns it), and every
file this module creates or touches ends owner-only (0o600) whatever the umask.
"""
from __future__ import annotations

import os
import shlex
import sqlite3
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import quote

from offload.ledger.migrations import SQLITE_LEDGER
from offload.ledger.protocol import LedgerError
from offload.ledger.sqlite_errors import error_kind, is_locked
from offload.ledger.versions import migrate_sqlite

BUSY_TIMEOUT_S = 10.0
_OPEN_RETRY_S = 0.02
_T = TypeVar("_T")


def secure_files(path: Path, *, create_main: bool = False) -> None:
    """Make the database and any sidecar owner-only; optionally create the main file 0o600."""
    if create_main and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    for candidate in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))):
        try:
            if candidate.stat().st_mode & 0o777 != 0o600:
                os.chmod(candidate, 0o600)
        except FileNotFoundError:
            continue


def initialize_schema(conn: sqlite3.Connection) -> None:
    """Bring the ledger's tables to this version (``offload.ledger.versions``: one transaction,
    ``SchemaTooNew`` for a newer store). Never changes the journal mode."""
    if sys.platform == "darwin":
        # macOS fsync does not order writes; without these a checkpoint at shutdown can corrupt.
        conn.execute("PRAGMA checkpoint_fullfsync=1")
        conn.execute("PRAGMA synchronous=FULL")
    migrate_sqlite(conn, SQLITE_LEDGER, database_file(conn))


def database_file(conn: sqlite3.Connection) -> str:
    """The file ``conn`` opened, for messages."""
    return str(conn.execute("PRAGMA database_list").fetchone()[2] or "state.db")


def retry_while_locked(step: Callable[[], _T], timeout_s: float | None = None) -> _T:
    """Run ``step``, retrying while another connection holds the file, up to ``timeout_s``
    (default: ``BUSY_TIMEOUT_S``, read at call time).

    Opening must never fail merely because another thread or process writes: the busy
    handler alone is not enough, because SQLite answers some lock conflicts (a journal-mode
    switch, a schema read racing a commit under load) with "locked" at once, without waiting.
    Any other error, or a lock held past the deadline, is raised.
    """
    deadline = time.monotonic() + (BUSY_TIMEOUT_S if timeout_s is None else timeout_s)
    delay_s = _OPEN_RETRY_S
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.5)


def connect(path: Path) -> sqlite3.Connection:
    """A raw autocommit connection whose busy timeout is set before any statement runs."""
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write or create anything (``mode=ro``); ``immutable=1`` when
    SQLite cannot even create its WAL index, on a read-only directory."""
    uri = f"file:{quote(str(path))}"
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return conn
    except sqlite3.OperationalError as exc:  # WAL file: its index cannot be created in a read-only directory
        conn.close()
        if is_locked(exc):  # a writer holds it: say so, never read around its lock
            raise
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def open_connection(path: Path) -> sqlite3.Connection:
    """A new connection to ``path`` with the schema in place and file modes secured."""
    secure_files(path, create_main=True)
    conn = connect(path)
    try:
        retry_while_locked(lambda: initialize_schema(conn))
    except BaseException:
        conn.close()
        raise
    secure_files(path)
    return conn


def classify_error(path: Path, exc: BaseException) -> LedgerError:
    """Turn a raw sqlite/OS error into one that names the file, the cause and the fix."""
    if isinstance(exc, LedgerError):
        return exc
    kind = error_kind(exc)
    if kind == "locked":
        return LedgerError(
            f"{path} stayed locked by another process for more than {BUSY_TIMEOUT_S:g} s; "
            "stop the process holding it (e.g. a long-running sqlite3 shell) — results are kept in memory meanwhile",
            kind="locked")
    if kind == "corrupt":
        return LedgerError(
            f"{path} is not a readable SQLite database ({exc}); move it aside "
            f"(mv {shlex.quote(str(path))} {shlex.quote(f'{path}.corrupt')}) and offload will start a fresh ledger",
            kind="corrupt")
    if kind == "full":
        return LedgerError(f"the disk or database holding {path} is full ({exc}); free space to resume durable records",
                           kind="full")
    if kind == "unwritable":
        return LedgerError(f"cannot write {path} ({exc}); make {path.parent} a directory writable by this user",
                           kind="unwritable")
    return LedgerError(f"ledger operation on {path} failed: {type(exc).__name__}: {exc}")
