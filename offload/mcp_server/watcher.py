"""The one change watcher of an ``offload mcp`` server: every wait (``delegation_result``'s
``wait_s``, ``tasks/result``) sleeps on it in the event loop, holding no thread.

What wakes the waiters: this process's completion bus (a unit finished here), and the ledger
for units finished anywhere else (an ``offload worker``, another host, a background process):
on PostgreSQL its LISTEN channel, and on every backend one poller that, while anybody waits,
reads a fingerprint of the unfinished rows and pending approval requests every ``POLL_S`` and
wakes everybody when it changed (a child done, a row finished, a command waiting for approval).

Invariants: a constant number of threads whatever the number of waiters (the bus drain, the
poller, PostgreSQL's listener); a wake is never lost (a waiter registers its event before it
reads the row it waits on); ``close()`` (SIGTERM) wakes every waiter for good, so each returns
its current state at once.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

import anyio

logger = logging.getLogger(__name__)

POLL_S = 0.5  # how stale a wait on a unit finished by another process may be


class Watcher:
    """See the module docstring. ``fingerprint()``: the ledger's state a waiter cares about
    (compared between polls); ``bus``: this process's completion queue (None: no bus)."""

    def __init__(self, fingerprint: Callable[[], Any], bus: Any = None, poll_s: float = POLL_S) -> None:
        self.fingerprint, self.bus, self.poll_s = fingerprint, bus, poll_s
        self.closing = False
        self._events: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}
        self._waiters = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._poll, name="offload-mcp-poller", daemon=True)]
        if bus is not None:
            self._threads.append(threading.Thread(target=self._drain, name="offload-mcp-bus", daemon=True))
        self._listener: Any = None
        self._last: Any = None  # the fingerprint last read

    def start(self, ledger: Any = None) -> "Watcher":
        self._last = self._read()  # the baseline: a wait's first poll compares with a state from before it
        for thread in self._threads:
            thread.start()
        self._listen(ledger)
        return self

    def _listen(self, ledger: Any) -> None:
        """PostgreSQL: LISTEN on the ledger's completion channel, one connection for all waiters."""
        url = getattr(ledger, "url", None)
        if not (isinstance(url, str) and url.startswith(("postgres://", "postgresql://"))):
            return
        try:
            from offload.ledger.postgres.listen import CompletionListener

            self._listener = CompletionListener(url, ledger.location, lambda ids: self.changed()).start()
        except Exception:  # the poller still wakes every waiter, a little later
            logger.warning("cannot LISTEN on the ledger; waits rely on the poller", exc_info=True)

    # -- waking -----------------------------------------------------------------------------------
    def changed(self) -> None:
        """Wake every waiter (any thread)."""
        with self._lock:
            events, self._events = self._events, {}
        for loop, event in events.items():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop closed
                pass

    def close(self) -> None:
        """Shutting down: every wait, now and later, returns at once."""
        self.closing = True
        self._stop.set()
        self.changed()
        if self._listener is not None:
            self._listener.stop()

    async def sleep(self, timeout_s: float) -> None:
        """Until the next change, ``close()`` or ``timeout_s``; call ``armed()`` first."""
        if self.closing or timeout_s <= 0:
            return
        with anyio.move_on_after(timeout_s):
            await self.armed().wait()

    def armed(self) -> asyncio.Event:
        """The event the next change sets, for the running loop (take it before reading the state
        you wait on, so a change in between is not missed)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            return self._events.setdefault(loop, asyncio.Event())

    def saw(self, fingerprint: Any) -> None:
        """A waiter read its row after reading ``fingerprint``: the poller compares with that, so
        a unit that started and finished between two polls (the same set of unfinished rows
        before and after) still wakes it."""
        with self._lock:
            self._last = fingerprint

    def waiting(self, delta: int) -> None:
        with self._lock:
            self._waiters += delta

    # -- the threads ------------------------------------------------------------------------------
    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                self.bus.get(timeout=self.poll_s)
            except Exception:  # queue.Empty: look at the stop flag again
                continue
            self.changed()

    def _read(self) -> Any:
        try:
            return self.fingerprint()
        except Exception:
            logger.debug("reading the ledger's fingerprint failed", exc_info=True)
            return None

    def _poll(self) -> None:
        """While anybody waits, compare the fingerprint with the last one read. Idle, nothing is
        read. Each waiter hands over the fingerprint it read before its row (``saw``), so a change
        after a waiter's read always differs from the last fingerprint (at worst a waiter re-reads
        its row for nothing)."""
        while not self._stop.wait(self.poll_s):
            with self._lock:
                idle = self._waiters == 0
            if idle:
                continue
            now = self._read()
            with self._lock:
                changed, self._last = now is not None and now != self._last, now if now is not None else self._last
            if changed:
                self.changed()
