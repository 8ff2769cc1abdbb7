"""Cross-host wake-up for the PostgreSQL ledger: LISTEN on the ledger's channel, hand the
rows that became deliverable to a callback.

Every terminal write and every recovery on any host sends ``pg_notify(channel, delegation_id)``
in the same transaction, so a notification is only ever seen for a committed row. One
``Loop`` per listener (``offload-ledger-listen``) holds its own connection (outside the pool:
a listening connection must stay open); each step waits up to a second for notifications and
batches what arrives within ``BATCH_WINDOW_S``, so a burst of 1,000 results costs a few
queries, not 1,000. A lost connection is reopened after a backoff (``RECONNECT_BACKOFF_S``,
from the first step again once a LISTEN is back in place).

Invariant: a notification may be lost (the connection broke, the server restarted), never a
row. After every (re)connect the callback gets ``None``, meaning "you may have missed some:
look at everything pending"; between notifications the consumers' slow orphan sweep remains.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import psycopg

from offload.engine.loop import Clock, Loop
from offload.ledger.postgres.sql import notify_channel
from offload.ledger.redaction import scrub

logger = logging.getLogger("offload.engine")

BATCH_WINDOW_S = 0.05
RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
# ``on_ids(ids)``: these delegation ids were just settled; ``on_ids(None)``: some may have been missed.
OnIds = Callable[[list[str] | None], None]


class CompletionListener:
    """LISTEN on one ledger's channel until ``stop()``; calls ``on_ids`` from its loop."""

    def __init__(self, url: str, label: str, on_ids: OnIds, channel: Callable[[str], str] = notify_channel, *,
                 connect: Callable[[], Any] | None = None, clock: Clock | None = None) -> None:
        """``channel(schema)``: which channel to LISTEN on (default: the completion channel).
        ``connect()``: a new autocommit connection (default: psycopg to ``url``)."""
        self.url, self.label, self.on_ids, self.channel = url, label, on_ids, channel
        self.listening = threading.Event()  # set while a LISTEN is in place (tests wait on it)
        self._connect = connect or (lambda: psycopg.connect(url, autocommit=True, connect_timeout=5))
        self._conn: Any = None
        self._stopping = False
        self._connects = 0  # connections tried: after the first, notifications may have been missed
        self._failures = 0  # in a row, since the last LISTEN was in place
        self.loop = Loop("offload-ledger-listen", self.step, 0.0, clock=clock, immediate=True,
                         what=f"the notification listener of {label}")

    def start(self) -> "CompletionListener":
        self.loop.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self.loop.request_stop()
        conn = self._conn
        if conn is not None:
            try:
                conn.cancel_safe()  # wakes a blocked notifies() wait
            except Exception:
                pass
        if self.loop.join(timeout_s=5):
            self._close()

    def step(self, now: float) -> float:
        """(Re)connect if needed, then wait up to a second for notifications and hand them
        over; the delay before the next step (0, or the backoff after a lost connection)."""
        try:
            if self._conn is None:
                self._listen()
            ids = self._batch(self._conn)
        except Exception as exc:  # a broken connection or server restart: reconnect, never die
            return self._lost(exc)
        if ids:
            self._deliver(ids)
        if self._stopping:
            self._close()  # the loop exits after this step; stop() may have given up waiting for it
        return 0.0

    def _listen(self) -> None:
        self._connects += 1
        self._conn = self._connect()
        schema = self._conn.execute("SELECT current_schema()").fetchone()[0]
        self._conn.execute(f'LISTEN "{self.channel(schema)}"')
        self.listening.set()
        self._failures = 0
        if self._connects > 1:  # the first LISTEN precedes the caller's own scan; a reconnect does not
            self._deliver(None)

    def _lost(self, exc: Exception) -> float:
        self.listening.clear()
        self._close()
        if self._stopping:
            return 0.0  # the loop exits after this step
        delay_s = RECONNECT_BACKOFF_S[min(self._failures, len(RECONNECT_BACKOFF_S) - 1)]
        log = logger.warning if self._failures == 0 else logger.debug
        log("Delegation ledger %s: lost the notification connection (%s); reconnecting in %.1fs, "
            "results meanwhile are found by the slow sweep.", self.label,
            scrub(str(exc).strip().splitlines()[0], self.url) if str(exc).strip() else type(exc).__name__, delay_s)
        self._failures += 1
        return delay_s

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                logger.debug("closing the notification connection failed", exc_info=True)

    def _batch(self, conn: Any) -> list[str]:
        """Wait up to 1 s for a first notification, then take what follows within the window."""
        first = [n.payload for n in conn.notifies(timeout=1.0, stop_after=1)]
        if not first or self._stopping:
            return first
        return first + [n.payload for n in conn.notifies(timeout=BATCH_WINDOW_S)]

    def _deliver(self, ids: list[str] | None) -> None:
        try:
            self.on_ids(ids)
        except Exception:
            logger.debug("completion listener callback failed", exc_info=True)
