"""The owner lease of one process on a PostgreSQL ledger: acquire, renew on a heartbeat, release.

A lease is a row in ``async_delegation_owners`` with a token from a sequence and an expiry on
the database's clock (so hosts with skewed clocks agree). Every row this process dispatches
carries the token; every fenced write (dispatch, claim, finished child, completion) first takes
the token's fence lock shared (``FENCE_LOCK``: a transaction-scoped advisory lock, which writes
nothing) and is refused if the lease row is gone, checked in a later statement (so with a
snapshot taken after the lock). Whoever deletes a lease row (a recovering host's takeover, the
owner's release) takes the same lock exclusive first (``TAKEOVER_LOCK``), held until it
commits: a fenced write either commits before the takeover reads anything, or waits for it
and then sees the lease gone. A dispatch or claim that finds it gone calls ``revoked`` and
retries under a new lease. So an owner that was paused or partitioned past its lease can never
overwrite the recovery when it resumes: its token no longer exists, and it takes a new lease
for new work. (The fence was the lease row locked ``FOR SHARE``: a tuple lock writes the row
and the WAL on every write, and a MultiXact when two writes hold it at once.)

``renew_once`` is the step (tests call it directly); the heartbeat is a ``Loop``
(``offload-ledger-lease``, every ``heartbeat_s``) that calls it from the first lease taken
until ``release``.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable

from offload.engine.loop import Clock, Loop
from offload.ledger.postgres.sql import DB_NOW

logger = logging.getLogger("offload.engine")

_ACQUIRE = (f"INSERT INTO async_delegation_owners (token, host_id, pid, started_at, expires_at)"
            f" VALUES (nextval('async_delegation_lease_tokens'), %s, %s, %s, {DB_NOW} + %s) RETURNING token")
_RENEW = f"UPDATE async_delegation_owners SET expires_at = {DB_NOW} + %s WHERE token = %s"
# The fence lock of one lease: two int4 keys (a separate space from the one-bigint keys of the
# schema and capacity locks), this schema's lease namespace and the token. Two tokens 2**31
# apart share a lock: a needless wait, never a missed one.
_FENCE_KEY = "hashtext('offload lease ' || current_schema()), (%s::bigint & 2147483647)::int"
FENCE_LOCK = f"SELECT pg_advisory_xact_lock_shared({_FENCE_KEY})"
TAKEOVER_LOCK = f"SELECT pg_advisory_xact_lock({_FENCE_KEY})"
# The owner's own release is a takeover too: one statement, the lock first (a one-time filter),
# so it waits for this process's fenced writes still in flight.
_RELEASE = f"DELETE FROM async_delegation_owners WHERE token = %s AND ({TAKEOVER_LOCK}) IS NOT NULL"


class OwnerLease:
    """This process's lease on one ledger. ``run(fn)`` runs ``fn(conn)`` on a pooled connection."""

    def __init__(self, run: Callable[[Callable[[Any], Any]], Any], host_id: str, lease_s: float,
                 heartbeat_s: float, owner: Callable[[], tuple[int, int | None]], clock: Clock | None = None) -> None:
        self._run, self.host_id, self.lease_s, self.heartbeat_s = run, host_id, lease_s, heartbeat_s
        self._owner = owner
        self._token: int | None = None
        self._lock = threading.Lock()
        self.heartbeat = Loop("offload-ledger-lease", self._beat, heartbeat_s, clock=clock, what="lease renewal")

    def token(self, conn: Any, *, verify: bool = False) -> int:
        """The current lease token, acquiring a lease on ``conn`` first if there is none (or,
        with ``verify``, if ours was revoked and the heartbeat has not noticed yet)."""
        with self._lock:
            if self._token is not None and verify and conn.execute(
                    "SELECT 1 FROM async_delegation_owners WHERE token=%s", (self._token,)).fetchone() is None:
                self._token = None
            if self._token is None:
                pid, started = self._owner()
                self._token = conn.execute(_ACQUIRE, (self.host_id, pid, started, self.lease_s)).fetchone()[0]
                self.heartbeat.start()
            return self._token

    def current(self) -> int | None:
        return self._token

    def revoked(self, token: int) -> None:
        """A write found ``token``'s lease gone (a recovering host took it): the next
        ``token()`` takes a new one. A newer token is kept."""
        with self._lock:
            if self._token == token:
                self._token = None

    def renew_once(self) -> bool | None:
        """Extend the lease. False if it was revoked (a recovering host took it; the next
        dispatch takes a new one), None if there is none or the database is unreachable."""
        token = self._token
        if token is None:
            return None
        try:
            renewed = self._run(lambda conn: conn.execute(_RENEW, (self.lease_s, token)).rowcount > 0)
        except Exception as exc:  # unreachable: keep the token, the next beat tries again
            logger.debug("lease renewal failed: %s", exc)
            return None
        if renewed:
            return True
        with self._lock:
            if self._token == token:
                self._token = None
        logger.error("Delegation ledger: this process's lease (host %s, pid %s, token %s) expired and was revoked "
                     "by a recovering host; units it was running are reported by that host as recovered, and their "
                     "results here are delivered in memory only. New work takes a new lease.",
                     self.host_id, os.getpid(), token)
        return False

    def _beat(self, now: float) -> bool:
        self.renew_once()
        return True  # beats until release: a revoked lease is replaced by the next dispatch

    def release(self) -> None:
        """Stop the heartbeat and delete the lease: rows still running become recoverable now."""
        self.heartbeat.stop(timeout_s=5)
        with self._lock:
            token, self._token = self._token, None
        if token is not None:
            try:
                self._run(lambda conn: conn.execute(_RELEASE, (token, token)))
            except Exception as exc:
                logger.debug("lease release failed (it expires by itself): %s", exc)
