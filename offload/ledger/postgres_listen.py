"""Cross-host wake-up for the PostgreSQL ledger: LISTEN on the ledger's channel, hand the
rows that became deliverable to a callback.

Every terminal write and every recovery on any host sends ``pg_notify(channel, delegation_id)``
in the same transaction, so a notification is only ever seen for a committed row. One daemon
thread per ledger holds its own connection (outside the pool: a listening connection must
stay open) and batches what arrives within ``BATCH_WINDOW_S``, so a burst of 1,000 results costs
a few queries, not 1,000.

Invariant: a notification may be lost (the connection broke, the server restarted), never a
row. After every (re)connect the callback gets ``None``, meaning "you may have missed some:
look at everything pending"; between notifications the consumers' slow orphan sweep remains.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import psycopg

from offload.ledger.postgres_sql import notify_channel

logger = logging.getLogger("offload.engine")

BATCH_WINDOW_S = 0.05
RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
# ``on_ids(ids)``: these delegation ids were just settled; ``on_ids(None)``: some may have been missed.
OnIds = Callable[[list[str] | None], None]


class CompletionListener:
    """LISTEN on one ledger's channel until ``stop()``; calls ``on_ids`` from its own thread."""

    def __init__(self, url: str, label: str, on_ids: OnIds, channel: Callable[[str], str] = notify_channel) -> None:
        """``channel(schema)``: which channel to LISTEN on (default: the completion channel)."""
        self.url, self.label, self.on_ids, self.channel = url, label, on_ids, channel
        self.listening = threading.Event()  # set while a LISTEN is in place (tests wait on it)
        self._stop = threading.Event()
        self._conn: Any = None
        self._thread = threading.Thread(target=self._loop, name="offload-ledger-listen", daemon=True)

    def start(self) -> "CompletionListener":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.cancel_safe()  # wakes a blocked notifies() wait
            except Exception:
                pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        failures, connects = 0, 0
        while not self._stop.is_set():
            try:
                self._listen_once(missed_some=connects > 0)
                failures = 0
            except Exception as exc:  # a broken connection or server restart: reconnect, never die
                self.listening.clear()
                if self._stop.is_set():
                    break
                delay_s = RECONNECT_BACKOFF_S[min(failures, len(RECONNECT_BACKOFF_S) - 1)]
                log = logger.warning if failures == 0 else logger.debug
                log("Delegation ledger %s: lost the notification connection (%s); reconnecting in %.1fs, "
                    "results meanwhile are found by the slow sweep.", self.label,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, delay_s)
                failures += 1
                self._stop.wait(delay_s)
            finally:
                connects += 1

    def _listen_once(self, missed_some: bool) -> None:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            self._conn = conn
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
            conn.execute(f'LISTEN "{self.channel(schema)}"')
            self.listening.set()
            if missed_some:  # the first LISTEN precedes the caller's own scan; a reconnect does not
                self._deliver(None)
            while not self._stop.is_set():
                ids = self._batch(conn)
                if ids:
                    self._deliver(ids)
        self._conn = None

    def _batch(self, conn: Any) -> list[str]:
        """Wait up to 1 s for a first notification, then take what follows within the window."""
        first = [n.payload for n in conn.notifies(timeout=1.0, stop_after=1)]
        if not first or self._stop.is_set():
            return first
        return first + [n.payload for n in conn.notifies(timeout=BATCH_WINDOW_S)]

    def _deliver(self, ids: list[str] | None) -> None:
        try:
            self.on_ids(ids)
        except Exception:
            logger.debug("completion listener callback failed", exc_info=True)
