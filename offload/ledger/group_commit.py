"""Group commit: ledger writes that arrive together share one transaction and one sync.

Leader/follower, no timer. A writer queues its write; the first writer to find no commit in
flight becomes the leader and commits everything queued so far. Writers arriving while that
commit is in flight wait on their own event; when it ends, the first of them is woken as the
next leader and commits everything queued by then. So an idle system commits a lone write at
once (it never waits for company), and a busy one pays one sync for many writes.

A caller returns only after the commit that holds its write (or with its own error): the
durability of every write is unchanged. The committer (``commit_batch``) decides how a batch
is written; it must give every write an outcome (``Write.succeed`` / ``Write.fail``).
A write's ``fn`` may run more than once inside rolled-back transactions before the one that
commits, so it must only touch the connection.
"""
from __future__ import annotations

import threading
from _thread import allocate_lock
from typing import Any, Callable


class Write:
    """One queued write: the work to run on the connection, and its outcome once committed."""

    __slots__ = ("fn", "create", "transaction", "_wake", "_lead", "_finished", "_result", "_error")

    def __init__(self, fn: Callable[[Any], Any], create: bool, transaction: bool) -> None:
        self.fn, self.create, self.transaction = fn, create, transaction
        # A follower parks on its own held lock until a leader releases it: one C call each
        # way, where an Event costs a Condition, a waiter lock and a notify per wake-up.
        # A lone write makes none.
        self._wake: Any = None
        self._lead = False
        self._finished = False
        self._result: Any = None
        self._error: BaseException | None = None

    def succeed(self, result: Any) -> None:
        self._result, self._error, self._finished = result, None, True

    def fail(self, error: BaseException) -> None:
        self._result, self._error, self._finished = None, error, True

    @property
    def finished(self) -> bool:
        return self._finished

    def outcome(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._result


class GroupCommit:
    """The queue of writes of one ledger and the leader hand-off between its writers."""

    def __init__(self, commit_batch: Callable[[list[Write]], None]) -> None:
        self._commit_batch = commit_batch
        self._lock = threading.Lock()
        self._queue: list[Write] = []
        self._in_flight = False
        self.batches = 0  # commits made, and writes they held: how well writes are grouped
        self.writes = 0

    def submit(self, fn: Callable[[Any], Any], *, create: bool = False, transaction: bool = False) -> Any:
        """Run ``fn(conn)`` in the next commit; return its result once committed, or raise its error."""
        write = Write(fn, create, transaction)
        with self._lock:
            self._queue.append(write)
            if self._in_flight:
                wake = write._wake = allocate_lock()
                wake.acquire()
            else:
                self._in_flight = True
                wake = None
        if wake is not None:
            wake.acquire()  # released once: with an outcome, or to lead the next batch
            if not write._lead:
                return write.outcome()
            write._wake = None  # already released: the hand-off of our own batch must skip it
        self._lead_one_batch()
        return write.outcome()

    def _lead_one_batch(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
            self.batches += 1
            self.writes += len(batch)
        try:
            self._commit_batch(batch)
        except BaseException as exc:  # the committer must not leave a follower waiting forever
            for write in batch:
                if not write.finished:
                    write.fail(exc)
            raise
        finally:
            self._hand_off(batch)

    def _hand_off(self, batch: list[Write]) -> None:
        with self._lock:
            if self._queue:
                self._queue[0]._lead = True
                self._queue[0]._wake.release()
            else:
                self._in_flight = False
        for write in batch:
            if write._wake is not None:
                write._wake.release()


def run_in_one_transaction(conn: Any, batch: list[Write], errors: tuple[type[BaseException], ...],
                           classify: Callable[[BaseException], BaseException],
                           commit: Callable[[Any, list[Write]], None]) -> bool | None:
    """Run a batch of writes in one SQLite transaction; a failing write fails alone.

    The writes run back to back; only if one of them fails is the transaction rolled back and
    rerun with each write inside its own savepoint (a savepoint per write costs two more
    statements per write, for a failure that is rare). Then the failing write is rolled back
    alone and gets its own (classified) error; its batch-mates are committed. Returns None if
    the transaction as a whole failed (BEGIN or COMMIT failed, or SQLite rolled everything
    back after an I/O or disk-full error): then nothing of the batch is kept and no write has
    an outcome, so the caller reruns each write alone. Otherwise returns whether some write
    failed (the caller drops the connection then, as after any failed write). ``commit`` runs
    the COMMIT (a seam for tests).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
        outcomes = _run_back_to_back(conn, batch, errors)
        if outcomes is None:
            if not conn.in_transaction:
                return None
            conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")
            outcomes = _run_in_savepoints(conn, batch, errors, classify)
            if outcomes is None:
                return None
        commit(conn, batch)
    except errors:
        _roll_back(conn, errors)
        return None
    except BaseException:
        _roll_back(conn, errors)
        raise
    for write, value, error in outcomes:
        write.fail(error) if error is not None else write.succeed(value)
    return any(error is not None for _, _, error in outcomes)


Outcomes = list[tuple[Write, Any, "BaseException | None"]]


def _run_back_to_back(conn: Any, batch: list[Write], errors: tuple[type[BaseException], ...]) -> Outcomes | None:
    """Every write's value, or None as soon as one write fails (the transaction is then spoilt)."""
    outcomes: Outcomes = []
    for write in batch:
        try:
            outcomes.append((write, write.fn(conn), None))
        except errors:
            return None
    return outcomes


def _run_in_savepoints(conn: Any, batch: list[Write], errors: tuple[type[BaseException], ...],
                       classify: Callable[[BaseException], BaseException]) -> Outcomes | None:
    """Each write in its own savepoint: a failing one is undone alone. None if SQLite rolled
    back the whole transaction."""
    outcomes: Outcomes = []
    for write in batch:
        conn.execute("SAVEPOINT w")
        try:
            value = write.fn(conn)
        except errors as exc:
            if not conn.in_transaction:
                return None
            conn.execute("ROLLBACK TO w")
            conn.execute("RELEASE w")
            outcomes.append((write, None, classify(exc)))
            continue
        conn.execute("RELEASE w")
        outcomes.append((write, value, None))
    return outcomes


def _roll_back(conn: Any, errors: tuple[type[BaseException], ...]) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except errors:
        pass
