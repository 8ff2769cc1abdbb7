"""PostgreSQL implementation of the delegation ledger, for several processes on several hosts.

Selected by ``ledger.url: postgresql://…`` in config.yaml or ``OFFLOAD_LEDGER_URL``. One
instance per process and URL, over one pool of connections (``postgres.connections``: a server
restart or a terminated backend costs one reconnect, not an error).

Invariants beyond the ledger contract:
- every claim is one conditional ``UPDATE`` (PostgreSQL re-checks the condition after a row
  lock wait, so of N racing consumers exactly one wins); multi-row claims use
  ``FOR UPDATE SKIP LOCKED``; nothing is read-then-written without a row lock;
- the hot writes are one round trip each, fenced as below: a unit's dispatch and its completion
  call server-side functions (``postgres.functions``), and a completion rides the next dispatch
  while the process is dispatching (``postgres.riders``); a work-queue claim and a finished
  child are scripts of statements (``postgres.script``);
- delivery claims are ``postgres.delivery``'s;
- each process holds an owner lease (``postgres.lease``); terminal writes and
  per-child records are fenced by its token, recovery of another host's rows needs its lease
  to have expired on the database clock;
- the store is never created by a read: reads of a database without the table return nothing;
- a failure is a ``LedgerError`` with one kind per cause (see ``postgres.errors``); an operation that
  lost its connection mid-flight is retried once on a fresh one;
- a durable write that fails because the server is unreachable is kept in order in memory and
  replayed, idempotent and fenced, once it is back (``postgres.outbox``); reads first write
  what waits.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, TypeVar

from offload.engine.loop import Clock, Loop
from offload.ledger.delivery_sql import POSTGRES
from offload.ledger.browse import BrowseReads
from offload.ledger.protocol import DispatchRow, LedgerError, LedgerRow, OwnerCheck, local_host
from offload.ledger.postgres.lease import TAKEOVER_LOCK, OwnerLease
from offload.ledger.postgres.listen import CompletionListener
from offload.ledger.postgres.connections import MISSING as _MISSING, PostgresConnections
from offload.ledger.postgres.side import PostgresSideTables
from offload.ledger.approval_table import PostgresApprovals
from offload.ledger.spend_table import PostgresSpend
from offload.ledger.step_table import PostgresSteps
from offload.ledger.postgres.work_queue import PostgresWorkQueue
from offload.ledger.postgres.delivery import PostgresDeliveryClaims
from offload.ledger.postgres.outbox import WriteOutbox, no_payload
from offload.ledger.postgres.riders import RETRY, Riders
import offload.ledger.postgres.replay as replays
import offload.ledger.postgres.queue as work_queue
import offload.ledger.postgres.functions as functions
import offload.ledger.postgres.script as script
from offload.ledger.postgres.sql import (
    DB_NOW, SELECT, SETTLE_ABANDONED, TABLE_EXISTS, completion_values, decode,
    dispatch_values, notify_channel, queue_channel,
)
from offload.ledger.postgres.sql import SQL as _SQL
from offload.ledger.tally import POSTGRES_TALLY as _TALLY, prune_counted
from offload.ledger.sqlite_rows import dumps
from offload.ledger.unit_partials import UnitPartials

logger = logging.getLogger("offload.engine")
_T = TypeVar("_T")
LISTEN_WAIT_S = 2.0


class PostgresLedger(PostgresConnections, PostgresSideTables, PostgresApprovals, PostgresSpend, PostgresSteps,
                     BrowseReads,
                     PostgresWorkQueue, PostgresDeliveryClaims):
    """The ledger in one PostgreSQL schema. Thread-safe; one instance per process and URL."""

    _dialect, _owner_hosts = POSTGRES, True

    def __init__(self, url: str, *, host_id: str | None = None, lease_s: float = 60.0, heartbeat_s: float = 10.0,
                 owner: Callable[[], tuple[int, int | None]] | None = None, clock: Clock | None = None) -> None:
        """``owner()``: this process's (pid, start-time fingerprint), stamped on lease rows and
        claimed units, for the same-host pid check (default: the pid alone). ``clock``: what
        drives the ledger's loops (default: real time)."""
        super().__init__(url)
        self.host_id = host_id or local_host()
        self.owner = owner or (lambda: (os.getpid(), None))
        self.clock = clock
        self.lease = OwnerLease(self._run, self.host_id, lease_s, heartbeat_s, self.owner, clock)
        self._tokens: dict[str, int] = {}  # delegation id -> the lease token it was dispatched under
        self._claimed: set[str] = set()  # ids claimed from the work queue, not yet started here
        self._partials = UnitPartials()  # finished children of the units running here
        self.fleet_full = False  # the last work-queue claim found no slot free on all hosts
        self._listener: CompletionListener | None = None
        self.outbox = WriteOutbox(self.location, clock=clock)
        self._riders = Riders()  # completions waiting to ride a dispatch's round trip

    def exists(self) -> bool:
        return bool(self._run(lambda conn: conn.execute(TABLE_EXISTS).fetchone()[0]))

    def watch(self, on_rows: Callable[[list[LedgerRow] | None], None]) -> None:
        """Call ``on_rows(rows)`` from a listener thread with rows that just became deliverable
        on any host (``None``: some may have been missed, look at everything pending). One
        listener per ledger; a second call replaces the callback."""
        if self._bad_url is not None:
            raise self._bad_url

        def on_ids(ids: list[str] | None) -> None:
            on_rows(None if ids is None else self._select(
                f"WHERE d.delegation_id = ANY(%s) AND {_SQL.pending_filter}", (ids,)))
        with self._pool_lock:
            if self._listener is None:
                self._listener = CompletionListener(self.url, self.location, on_ids, clock=self.clock).start()
            else:
                self._listener.on_ids = on_ids
            listener = self._listener
        # The caller scans what is pending right after this; listening first means nothing
        # settled in between is missed. A server that is down does not hold the caller up long.
        listener.listening.wait(timeout=LISTEN_WAIT_S)

    def loops(self) -> list[Loop]:
        """The ledger's own loops: lease heartbeat, outbox replayer, ``watch``'s listener.
        ``close`` stops them, in order, with a last replay and the lease's release; listeners
        from ``listen`` and ``watch_control`` belong to (and are stopped by) their callers."""
        listener = self._listener
        return [self.lease.heartbeat, self.outbox.replayer, *([listener.loop] if listener is not None else [])]

    def close(self) -> None:
        with self._pool_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self.outbox.close()
        self.lease.release()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # -- writes of the running engine ------------------------------------------------
    def persist_dispatch(self, row: DispatchRow, now: float, write: Callable[[Any], None] | None = None) -> None:
        def insert(conn: Any) -> None:
            # never stamps a row with a revoked lease: the insert is gated on the lease row
            self._tokens[row.delegation_id], _ = self._leased(conn, lambda token: functions.dispatch(
                conn, dispatch_values(row, now, self.host_id, token), token, riders=self._riders.take()))

        def replay(conn: Any) -> None:
            # Never replaces a row: one that exists was written by this very dispatch before its
            # acknowledgement was lost, and may since have been recovered under a revoked lease.
            token = self.lease.token(conn, verify=True)
            self._tokens[row.delegation_id] = replays.dispatch_once(
                conn, dispatch_values(row, now, self.host_id, token), row.delegation_id)
        self._write("recording a dispatch", row.delegation_id, write or insert, replay, lambda: len(dumps(row.task)),
                    create=True)

    def persist_dispatch_within(self, row: DispatchRow, now: float, max_running: int) -> bool:
        """``persist_dispatch`` of a unit that opens a new capacity slot, only if fewer than
        ``max_running`` slots run on all hosts together (``postgres.capacity``); False if not.
        A unit this process claimed from the work queue is not asked again: its claim took its
        slot (counting it now would count it against itself). While the server is unreachable
        the capacity cannot be asked: the row is kept for replay like any dispatch and the
        caller's own (per process) limit decides."""
        if row.delegation_id in self._claimed:
            self._claimed.discard(row.delegation_id)
            values = dispatch_values(row, now, self.host_id, self._tokens[row.delegation_id])
            self.persist_dispatch(row, now, write=lambda conn: work_queue.start_claimed(conn, values))
            return True
        admitted = [True]

        def write(conn: Any) -> None:
            token, admitted[0] = self._leased(conn, lambda token: functions.dispatch(
                conn, dispatch_values(row, now, self.host_id, token), token, max_running, self._riders.take()))
            if admitted[0]:
                self._tokens[row.delegation_id] = token
        self.persist_dispatch(row, now, write=write)
        return admitted[0]

    def forget(self, delegation_id: str) -> None:
        self._tokens.pop(delegation_id, None)
        self._claimed.discard(delegation_id)
        self._partials.forget(delegation_id)

        def delete(conn: Any) -> None:
            conn.execute(_SQL.delete_row, (delegation_id,))
        self._write("forgetting an unscheduled unit", delegation_id, delete, delete, no_payload, missing=None)

    def record_unit_child(self, delegation_id: str, entry: dict[str, Any], now: float) -> bool:
        with self._partials.holding(delegation_id, entry) as result_json:
            def write(conn: Any) -> bool:
                token = self._tokens.get(delegation_id)  # read when written: a replayed dispatch sets it
                return script.record_child(conn, result_json, now, delegation_id, token)
            return self._write("recording a finished child", delegation_id, write, write,
                               lambda: len(result_json), missing=False)

    def persist_completion(self, row: DispatchRow, event: dict[str, Any], result: dict[str, Any], now: float) -> None:
        state, completed_at = event.get("status") or "unknown", event.get("completed_at") or now
        event_json, result_json = dumps(event), dumps(result)

        def update(token: int) -> tuple[Any, ...]:
            return state, completed_at, now, event_json, result_json, row.delegation_id, token

        def write(conn: Any, written: int | None = None, token: int | None = None) -> None:
            token = token or self._tokens.get(row.delegation_id) or self.lease.token(conn)
            # moves the row still running under our token (or writes a vanished one whole) and
            # notifies, all only while our lease exists
            whole = lambda: completion_values(  # noqa: E731 - the rare vanished row only
                row, state, completed_at, now, event_json, result_json, self.host_id, token)
            if not functions.complete(conn, token, update(token), whole, notify_channel(self._schema),
                                      row.delegation_id, written):
                raise self._fenced(row.delegation_id, token)
            self._tokens.pop(row.delegation_id, None)

        def ride_or_write() -> None:
            """Along the next dispatch's round trip while this process is dispatching
            (``postgres.riders``), else on its own."""
            token = self._tokens.get(row.delegation_id)
            if token is not None and self._schema is not None:
                written = self._riders.ride(functions.completion(update(token), notify_channel(self._schema)))
                if written is not RETRY:
                    if written == 0:  # its row vanished: written whole, on its own
                        return self._run(lambda conn: write(conn, written, token), create=True)
                    return write(None, written, token)  # settled (or fenced) without another exchange
            return self._run(write, create=True)
        self._partials.forget(row.delegation_id)  # its children are all in ``result``
        self._write("recording a completion", row.delegation_id, write, write,
                    lambda: len(event_json) + len(result_json), create=True, now=ride_or_write)

    def _leased(self, conn: Any, attempt: Callable[[int], tuple[bool, _T]]) -> tuple[int, _T]:
        """``attempt(token)`` under this process's lease: (held, value). Once more under a new
        lease if ours was revoked (the heartbeat had not noticed yet); (token, value)."""
        for _ in (1, 2):
            token = self.lease.token(conn)
            held, value = attempt(token)
            if held:
                return token, value
            self.lease.revoked(token)
        raise LedgerError(f"the lease this process just took on {self.location} was revoked at once; another host "
                          "judges it expired: check the clocks and ledger.lease_seconds", kind="fenced")

    def _fenced(self, delegation_id: str, token: int) -> LedgerError:
        return LedgerError(
            f"the lease (token {token}) under which this process ran delegation {delegation_id} on {self.location} "
            "expired and was revoked by a recovering host, so its row was settled there; this result is "
            "delivered in memory only and the recovered row stands — keep heartbeats within ledger.lease_seconds",
            kind="fenced")

    def _notify(self, conn: Any, delegation_id: str, origin_session: str) -> None:
        if self._schema is not None:
            conn.execute("SELECT pg_notify(%s, %s)", (notify_channel(self._schema), delegation_id))

    def listen(self, on_ids: Callable[[list[str] | None], None], *, settled: bool = False) -> CompletionListener:
        """A started listener calling ``on_ids`` for every unit queued on any host (the work
        queue's own channel: results settled do not wake it), or with ``settled`` for every
        result settled (a slot freed: what a worker waits for while the fleet is full); the
        caller stops it."""
        if self._bad_url is not None:
            raise self._bad_url
        return CompletionListener(self.url, self.location, on_ids, channel=notify_channel if settled else queue_channel,
                                  clock=self.clock).start()

    # -- recovery and replay ------------------------------------------------------------
    def running_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.running_where, ())

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._run(lambda conn: conn.execute(sql, params).fetchall(), missing=[])


    def owner_host(self, row: LedgerRow) -> str | None:
        return (row.extra or {}).get("owner_host")

    def is_abandoned(self, row: LedgerRow, alive: OwnerCheck) -> bool:
        """Whether ``row``'s owner is gone: its lease expired or was revoked, or it ran on this
        host and its process is dead (the pid check is only meaningful on the same host)."""
        extra = row.extra or {}
        if not extra.get("lease_live"):
            return True
        return extra.get("owner_host") == self.host_id and not alive(row.owner_pid, row.owner_started_at)

    def owned_here(self, row: LedgerRow, is_owner: OwnerCheck) -> bool:
        """Whether ``row``'s owner is a process on this host that ``is_owner`` accepts, under a
        live lease."""
        extra = row.extra or {}
        return (extra.get("owner_host") == self.host_id and bool(extra.get("lease_live"))
                and is_owner(row.owner_pid, row.owner_started_at))

    def settle_abandoned(self, delegation_id: str, event: dict[str, Any], result: dict[str, Any], now: float) -> bool:
        event_json, result_json = dumps(event), dumps(result)

        def settle(conn: Any) -> bool:
            with conn.transaction():
                found = conn.execute("SELECT owner_token FROM async_delegations WHERE delegation_id=%s"
                                     " AND state='running'", (delegation_id,)).fetchone()
                if found is None:
                    return False
                if found[0] is not None and not self._revoke_expired(conn, found[0]):
                    return False
                # delivery_state is left alone: an acknowledged row stays acknowledged.
                settled = conn.execute(SETTLE_ABANDONED,
                                       (now, now, event_json, result_json, delegation_id, found[0])).fetchone()
                if settled is not None:
                    self._notify(conn, delegation_id, settled[0])
                return settled is not None
        return self._run(settle, missing=False)

    def _revoke_expired(self, conn: Any, token: int) -> bool:
        """Delete the owner's lease so it is fenced out, unless it is live on another host.
        Its fence lock is taken first (``postgres.lease``), held to the caller's commit: the
        owner's fenced writes in flight commit before this reads the lease, later ones wait
        and then find it gone. The row lock orders this against a renewal."""
        conn.execute(TAKEOVER_LOCK, (token,))
        lease = conn.execute(f"SELECT host_id, expires_at > {DB_NOW} FROM async_delegation_owners WHERE token=%s"
                             " FOR UPDATE", (token,)).fetchone()
        if lease is None:
            return True
        host_id, live = lease
        if live and host_id != self.host_id:
            return False  # live elsewhere: only the same host may judge its owner by pid
        conn.execute("DELETE FROM async_delegation_owners WHERE token=%s", (token,))
        return True

    def pending_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.pending_where, ())

    def settled_rows(self, limit: int) -> list[LedgerRow]:
        return self._select(_SQL.settled_where, (int(limit),))

    def undelivered_rows(self, session_id: str) -> list[LedgerRow]:
        return self._select(_SQL.session_where, (session_id, session_id, session_id))

    def get(self, delegation_id: str) -> LedgerRow | None:
        rows = self._select(_SQL.by_id_where, (delegation_id,))
        return rows[0] if rows else None

    # -- housekeeping -----------------------------------------------------------------------
    def prune(self, now: float, retention_s: float, max_settled: int) -> int:
        def prune_rows(conn: Any) -> int:
            with conn.transaction():
                deleted = prune_counted(conn.execute, _TALLY, _SQL.prune_expired, _SQL.prune_over_cap,
                                        now - retention_s, max_settled)
                if deleted:
                    self._prune_side_records(conn)
                return deleted
        return self._run(prune_rows, missing=0)

    # -- helpers ----------------------------------------------------------------------------
    def _write(self, what: str, delegation_id: str, write: Callable[[Any], _T], replay: Callable[[Any], Any],
               measure: Callable[[], int], *, create: bool = False, missing: Any = _MISSING,
               now: Callable[[], _T] | None = None) -> _T:
        """A durable write through the outbox: made now (``now()``, by default ``write`` on a
        pooled connection), or kept in order while the server is unreachable and replayed
        (``replay``: the idempotent, fenced form) once it is back."""
        return self.outbox.submit(what, delegation_id, now or (lambda: self._run(write, create=create, missing=missing)),
                                  lambda: self._run(replay, create=create, missing=missing), measure)

    def _catch_up(self) -> None:
        """Write what waits in the outbox first: a read then sees this process's writes in order."""
        if len(self.outbox):
            self.outbox.flush()

    def _select(self, tail: str, params: tuple[Any, ...]) -> list[LedgerRow]:
        self._catch_up()
        return self._run(lambda conn: [decode(r) for r in conn.execute(f"{SELECT} {tail}", params).fetchall()],
                         missing=[])

