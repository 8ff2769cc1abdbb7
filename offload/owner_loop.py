"""The owner side of cross-process control and visibility: one daemon thread per process,
alive only while the process runs units, that carries out control requests other processes
and hosts left in the ledger (``offload.control_requests``) and publishes its units' live
activity there (``offload.activity``, at most every ``activity.INTERVAL_S``, only changes).

Every offload command installs it (``install()``, from the CLI's entry point), so chat, run,
gateway and worker all honour ``offload stop`` and the dashboard's interrupt. On a ledger that
can notify (PostgreSQL: ``watch_control``, LISTEN/NOTIFY) the thread sleeps until a request
is made on any host, with a slow poll (``SHARED_POLL_S``) for a missed notification; on a
local ledger (SQLite) it polls every ``POLL_S``, one indexed read while nothing is requested.

Invariants: the thread starts on the engine's ``dispatched`` notification and exits when the
engine has no live unit (re-checked under the lock a dispatch takes to start it), so an idle
process costs nothing; it never dies of a failed poll; it never touches the dispatch path.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from offload.engine.observers import add_observer
from offload import activity

logger = logging.getLogger(__name__)

POLL_S = 0.5
SHARED_POLL_S = 5.0
LISTEN_WAIT_S = 2.0


class OwnerLoop:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.publisher = activity.Publisher()

    def __call__(self, kind: str, delegation_id: str, fields: dict[str, Any]) -> None:
        if kind != "dispatched":
            return
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="offload-owner-loop", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        # Imported here: installing the loop must not load the engine (`offload --help` stays light).
        from offload.default_runtime import engine
        from offload.default_runtime.delivery import current_ledger

        ledger = current_ledger()
        wake = threading.Event()
        listener = self._listen(ledger, wake)
        control_s = SHARED_POLL_S if listener is not None else POLL_S
        next_control = time.monotonic()
        next_activity = next_control + activity.INTERVAL_S  # nothing is old enough to publish before
        try:
            while True:
                now = time.monotonic()
                if wake.is_set() or now >= next_control:
                    wake.clear()
                    self.tick(ledger)
                    next_control = now + control_s
                if now >= next_activity:
                    self.publish(ledger, engine.list_async_delegations())
                    next_activity = now + activity.INTERVAL_S
                wake.wait(max(0.0, min(next_control, next_activity) - time.monotonic()))
                with self.lock:
                    if engine.active_count() == 0:
                        self.thread = None
                        break
            self.publish(ledger, [])  # nothing live here any more: withdraw what we published
        finally:
            if listener is not None:
                listener.stop()

    def publish(self, ledger: Any, items: list[dict[str, Any]]) -> None:
        try:
            self.publisher.publish(ledger, items, time.time())
        except Exception:  # activity is decoration; the next tick tries again
            logger.debug("publishing activity failed", exc_info=True)

    @staticmethod
    def _listen(ledger: Any, wake: threading.Event) -> Any:
        watch = getattr(ledger, "watch_control", None)
        if watch is None:
            return None
        try:
            listener = watch(lambda _ids: wake.set())
        except Exception:  # a server that is down: poll until it is back
            logger.debug("cannot listen for control requests; polling", exc_info=True)
            return None
        listener.listening.wait(LISTEN_WAIT_S)  # requests made before this are found by the first tick
        return listener

    @staticmethod
    def tick(ledger: Any, now: float | None = None) -> None:
        from offload import control_requests

        try:
            control_requests.act_on_requests(ledger, time.time() if now is None else now)
        except Exception:  # the loop outlives a bad request or an unreachable ledger
            logger.debug("acting on control requests failed", exc_info=True)


_loop: OwnerLoop | None = None


def install() -> OwnerLoop:
    """Honour control requests for units this process runs (idempotent)."""
    global _loop
    if _loop is None:
        _loop = OwnerLoop()
        add_observer(_loop)
    return _loop
