"""SQLite implementation of the delegation ledger: table ``async_delegations`` in ``state.db``.

The ledger is a guest in ``state.db``: the session store owns the file and its journal mode,
so nothing here ever sets ``journal_mode``. The database and its sidecars are owner-only
(0o600) whatever the umask, because they hold conversation content.

Speed: one connection per ledger (per process and file), opened once with the schema checked
once, reused under a lock; a lone write runs in autocommit. Writes from many threads that
arrive together share one transaction and one sync (``group_commit``: leader/follower, no
timer), and each caller still returns only once its own write is committed. Every use re-checks the
file's identity (device, inode) so a ``state.db`` deleted or replaced while units run is
noticed and reopened instead of silently writing into an unlinked file.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from offload.ledger.delivery_sql import SQLITE, with_child
from offload.ledger.group_commit import GroupCommit, Write, run_in_one_transaction
from offload.ledger.browse import BrowseReads
from offload.ledger.protocol import DispatchRow, LedgerError, LedgerRow, SingleHostOwners
from offload.ledger.sqlite_errors import is_locked  # noqa: F401 - is_locked: part of this API
from offload.ledger.sqlite_files import classify_error, open_connection
from offload.ledger.sqlite_side import SqliteSideTables
from offload.ledger.approval_table import SqliteApprovals
from offload.ledger.spend_table import SqliteSpend
from offload.ledger.step_table import SqliteSteps
from offload.ledger.owner_epoch import SqliteEpochs
from offload.ledger.sqlite_rows import (  # noqa: F401 - dumps and the columns are part of this module's API
    _COLUMN_NAMES, _COLUMNS, _INSERT_DISPATCH, _SCHEMA, _SELECT, _UPDATE_COMPLETION, _UPSERT_COLUMNS, _UPSERT_COMPLETION, _decode,
    _row_values, dumps, _RUNNING_RESULTS_FENCED, _UPDATE_COMPLETION_FENCED,
)
from offload.ledger.sqlite_rows import SQL as _SQL
from offload.ledger.tally import SQLITE_TALLY as _TALLY, prune_counted

_INSERT_QUEUED = _INSERT_DISPATCH.replace("INSERT OR REPLACE", "INSERT OR IGNORE")  # never over an existing id

logger = logging.getLogger("offload.engine")

# A failed write: ValueError/OverflowError are values sqlite3 cannot bind (a lone surrogate in
# a session key) -- a failed write like any other, never a crash of the caller.
_DB_ERRORS = (sqlite3.Error, OSError, ValueError, OverflowError)
_T = TypeVar("_T")


class SqliteLedger(SqliteSideTables, SqliteApprovals, SqliteSpend, SqliteSteps, SqliteEpochs, BrowseReads,
                   SingleHostOwners):
    """The ledger in one ``state.db``. Thread-safe; one instance per process and file."""

    _dialect = SQLITE

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._known: tuple[int, int] | None = None  # the file last opened; survives a dropped connection
        self._epochs: dict[str, int] = {}  # delegation id -> the owner epoch this instance took it under
        self._group = GroupCommit(lambda batch: self._commit_batch(batch))  # late-bound: a seam for tests

    # -- connection -------------------------------------------------------------------
    def exists(self) -> bool:
        return self.path.exists()

    def _connection(self, create: bool) -> sqlite3.Connection | None:
        try:
            st = os.stat(self.path)
            identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            identity = None
        if self._known is not None and identity != self._known:
            self._file_changed(identity)
        if self._conn is not None and identity == self._identity and identity is not None:
            return self._conn
        self._drop_connection()
        if identity is None and not create:
            return None
        self._conn = open_connection(self.path)
        st = os.stat(self.path)
        self._identity = self._known = (st.st_dev, st.st_ino)
        return self._conn

    def _file_changed(self, identity: tuple[int, int] | None) -> None:
        """Say once that the file under us changed: a deleted ledger silently loses rows."""
        self._known = None
        if identity is None:
            logger.error("Delegation ledger: %s was deleted while this process was using it; the rows recorded "
                         "there (undelivered results, running units, finished children) are lost. Units still "
                         "running are delivered in memory and written to a new ledger when they finish.", self.path)
        else:
            logger.warning("Delegation ledger: %s was replaced by another file while in use; using the new file "
                           "from now on.", self.path)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        self._conn, self._identity = None, None

    @contextmanager
    def _use(self, *, create: bool = False, transaction: bool = False) -> Iterator[sqlite3.Connection | None]:
        with self._lock:
            try:
                conn = self._connection(create)
                if conn is None:
                    yield None
                    return
                if not transaction:
                    yield conn
                    return
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except _DB_ERRORS as exc:
                self._drop_connection()  # reopen next time: the file may have been repaired
                raise classify_error(self.path, exc) from exc

    def close(self) -> None:
        with self._lock:
            self._drop_connection()

    # -- group commit ---------------------------------------------------------------------
    def _write(self, fn: Callable[[sqlite3.Connection | None], _T], *, create: bool = False,
               transaction: bool = False) -> _T:
        """Run ``fn(conn)`` in the next commit, shared with writes of other threads queued meanwhile."""
        return self._group.submit(fn, create=create, transaction=transaction)

    def _commit_batch(self, batch: list[Write]) -> None:
        if len(batch) > 1 and self._commit_together(batch):
            return
        for write in batch:  # a lone write, or a batch whose transaction failed as a whole
            self._run_alone(write)

    def _run_alone(self, write: Write) -> None:
        try:
            with self._use(create=write.create, transaction=write.transaction) as conn:
                result = write.fn(conn)
        except Exception as exc:  # LedgerError, or a bug: the caller gets it as before
            write.fail(exc)
        else:
            write.succeed(result)

    def _commit_together(self, batch: list[Write]) -> bool:
        """One transaction for the whole batch; False if nothing of it was committed."""
        with self._lock:
            if not all(write.create for write in batch) and not self.path.exists():
                return False  # writes that must not create the file: each alone answers "no ledger"
            try:
                conn = self._connection(create=True)
            except _DB_ERRORS:
                self._drop_connection()
                return False
            some_failed = run_in_one_transaction(conn, batch, _DB_ERRORS, lambda exc: classify_error(self.path, exc),
                                                 self._commit_transaction)
            if some_failed is not False:
                self._drop_connection()  # reopen next time, as after any failed write
            return some_failed is not None

    def _commit_transaction(self, conn: sqlite3.Connection, batch: list[Write]) -> None:
        conn.execute("COMMIT")  # a method, so the kill-fuzz owner can die around a batched commit

    # -- writes of the running engine ------------------------------------------------
    def persist_dispatch(self, row: DispatchRow, now: float) -> None:
        values = _row_values(row, "running", None, now, None, None,  # serialized before taking the lock
                             self.epoch_of(row.delegation_id))
        self._write(lambda conn: conn.execute(_INSERT_DISPATCH, values), create=True)

    def forget(self, delegation_id: str) -> None:
        self._write(lambda conn: conn and conn.execute(_SQL.delete_row, (delegation_id,)))

    def record_unit_child(self, delegation_id: str, entry: dict[str, Any], now: float) -> bool:
        epoch = self.epoch_of(delegation_id)
        return self._write(lambda conn: self._record_child(conn, delegation_id, entry, now, epoch), transaction=True)

    @staticmethod
    def _record_child(conn: sqlite3.Connection | None, delegation_id: str, entry: dict[str, Any], now: float,
                      epoch: int) -> bool:
        if conn is None:
            return False
        found = conn.execute(_RUNNING_RESULTS_FENCED, (delegation_id, epoch)).fetchone()
        if found is None:
            return False
        conn.execute(_SQL.write_results, (with_child(found[0], entry), now, delegation_id))
        return True

    def persist_completion(self, row: DispatchRow, event: dict[str, Any], result: dict[str, Any], now: float) -> None:
        state, completed_at = event.get("status") or "unknown", event.get("completed_at") or now
        event_json, result_json = dumps(event), dumps(result)  # serialized before taking the lock
        epoch = self.epoch_of(row.delegation_id)

        def write(conn: sqlite3.Connection) -> bool:
            # The dispatch row is normally there: move only the terminal fields, under our owner
            # epoch (a unit handed over or taken over since is not ours to settle). If it
            # vanished (state.db deleted or replaced mid-run), write the whole row again.
            moved = conn.execute(_UPDATE_COMPLETION_FENCED, (state, completed_at, now, event_json, result_json,
                                                             row.delegation_id, epoch)).rowcount
            if moved:
                return True
            if conn.execute(_SQL.claim_holder, (row.delegation_id,)).fetchone() is not None:
                return False  # there, under another epoch: fenced out
            conn.execute(_UPSERT_COMPLETION, _row_values(row, state, completed_at, now, event_json, result_json, epoch))
            return True
        if not self._write(write, create=True):
            raise LedgerError(f"delegation {row.delegation_id} was handed over to or taken over by another process "
                              f"(owner epoch {epoch} is no longer its epoch in {self.path}), so this process does not "
                              "record its result; the new owner's stands", kind="fenced")

    # -- the admission queue -------------------------------------------------------------
    def enqueue_unit(self, row: DispatchRow, now: float, held: bool = False) -> bool:
        values = _row_values(row if held else replace(row, owner_pid=None, owner_started_at=None),
                             "queued", None, now, None, None)
        return self._write(lambda conn: conn.execute(_INSERT_QUEUED, values).rowcount > 0, create=True)

    def queued_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.queued_where, ())

    def claim_queued(self, delegation_id: str, now: float, owner: tuple[int, int | None],
                     max_running: int) -> LedgerRow | None:
        # One host: the engine's own slots are the capacity, so max_running is not asked here.
        if not self._take_queued(delegation_id, now, owner):
            return None
        return self.get(delegation_id)

    def requeue_unit(self, row: DispatchRow, now: float) -> None:
        values = _row_values(row, "queued", None, now, None, None)

        def write(conn: sqlite3.Connection) -> None:
            if not conn.execute(_SQL.requeue, (now, row.delegation_id)).rowcount:
                conn.execute(_INSERT_QUEUED, values)  # vanished (forgotten by a refused dispatch): again whole
        self._write(write, create=True, transaction=True)

    # -- recovery and replay ------------------------------------------------------------
    def running_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.running_where, ())

    def settle_abandoned(self, delegation_id: str, event: dict[str, Any], result: dict[str, Any], now: float) -> bool:
        # delivery_state is left alone: a running row is pending unless its in-memory event
        # was already acknowledged (its terminal write had failed), and then it stays delivered.
        return self._update(_SQL.settle_abandoned, (now, now, dumps(event), dumps(result), delegation_id))

    def pending_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.pending_where, ())

    def settled_rows(self, limit: int) -> list[LedgerRow]:
        return self._select(_SQL.settled_where, (int(limit),))

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._use() as conn:
            return conn.execute(sql, params).fetchall() if conn is not None else []


    def undelivered_rows(self, session_id: str) -> list[LedgerRow]:
        return self._select(_SQL.session_where, (session_id, session_id, session_id))

    def get(self, delegation_id: str) -> LedgerRow | None:
        rows = self._select(_SQL.by_id_where, (delegation_id,))
        return rows[0] if rows else None

    # -- delivery claims ------------------------------------------------------------------
    def claimed_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.claimed_where, ())

    def claim_delivery(self, delegation_id: str, claim: str, now: float, lease_s: float,
                       holder: tuple[int, int | None] | None = None) -> bool | None:
        params = (claim, now, *(holder or (None, None)), delegation_id, now - lease_s)
        return self._write(lambda conn: self._claim(conn, delegation_id, params))

    @staticmethod
    def _claim(conn: sqlite3.Connection | None, delegation_id: str, params: tuple[Any, ...]) -> bool | None:
        if conn is None:
            return None
        if conn.execute(_SQL.claim, params).rowcount:
            return True
        exists = conn.execute(_SQL.claim_holder, (delegation_id,)).fetchone()
        return False if exists else None

    def complete_delivery(self, delegation_id: str, claim: str, now: float) -> bool:
        return self._update(_SQL.complete, (now, now, delegation_id, claim))

    def release_delivery(self, delegation_id: str, claim: str, now: float, max_attempts: int,
                         reason: str | None = None) -> str:
        params = (max_attempts, max_attempts, reason, max_attempts, now, delegation_id, claim)
        # fetchall: SQLite finishes a RETURNING statement (and frees its lock) only when stepped to the end
        rows = self._write(lambda conn: conn.execute(_SQL.release, params).fetchall() if conn else [])
        return rows[0][0] if rows else ""

    def record_progress(self, delegation_id: str, claim: str, parts: int, now: float) -> bool:
        return self._update(_SQL.progress, (parts, now, delegation_id, claim))

    def defer_delivery(self, delegation_id: str, claim: str, now: float) -> bool:
        return self._update(_SQL.defer, (now, delegation_id, claim))

    def drop_delivery(self, delegation_id: str, claim: str | None, now: float, reason: str | None = None) -> bool:
        if claim is None:
            return self._update(_SQL.drop, (now, reason, delegation_id))
        return self._update(_SQL.drop_claimed, (now, reason, delegation_id, claim))

    def mark_delivered(self, delegation_id: str, now: float) -> bool:
        return self._update(_SQL.mark_delivered, (now, now, delegation_id))

    # -- housekeeping -----------------------------------------------------------------------
    def prune(self, now: float, retention_s: float, max_settled: int) -> int:
        with self._use(transaction=True) as conn:
            if conn is None:
                return 0
            deleted = prune_counted(conn.execute, _TALLY, _SQL.prune_expired, _SQL.prune_over_cap,
                                    now - retention_s, max_settled)
            if deleted:
                self._prune_side_records(conn)
            return deleted

    # -- helpers ----------------------------------------------------------------------------
    def _update(self, statement: str, params: tuple[Any, ...]) -> bool:
        return self._write(lambda conn: conn is not None and conn.execute(statement, params).rowcount > 0)

    def _select(self, tail: str, params: tuple[Any, ...]) -> list[LedgerRow]:
        with self._use() as conn:
            if conn is None:
                return []
            return [_decode(row) for row in conn.execute(f"{_SELECT} {tail}", params).fetchall()]
