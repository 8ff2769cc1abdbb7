"""``offload stop ID`` across processes: a request file the owning chat or run acts on.

A delegation runs inside the process that dispatched it, and only that process can interrupt
it. ``offload stop`` (any process) drops ``$HERMES_HOME/stop-requests/<id>``; every
``offload chat`` / ``offload run`` watches that directory on a daemon thread and interrupts
the units it owns. The stopped unit reports through the normal path (its partial result is
delivered to its session), so the requester waits on the ledger row leaving ``running``.

Invariants: a watcher removes only requests for units it really interrupted; the requester
removes its own request when it stops waiting, so no stale request outlives it.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from tools.hermes_home import get_hermes_home

logger = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.25
_DIR = "stop-requests"


def request_dir() -> Path:
    return get_hermes_home() / _DIR


def request(delegation_id: str) -> Path:
    """Ask the owner of ``delegation_id`` to stop it; returns the request file to remove later."""
    folder = request_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / delegation_id
    path.touch(mode=0o600)
    return path


def withdraw(path: Path) -> None:
    path.unlink(missing_ok=True)


def act_on_requests(folder: Path) -> list[str]:
    """Interrupt every requested unit this process owns; returns their ids. Pure of timing."""
    from tools.async_delegation import interrupt_delegation

    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:  # no request yet, or an unreadable home: nothing to act on
        return []
    stopped = []
    for delegation_id in names:
        if interrupt_delegation(delegation_id, reason="stopped by `offload stop`"):
            withdraw(folder / delegation_id)
            stopped.append(delegation_id)
    return stopped


def start_watcher(stop_event: threading.Event | None = None) -> threading.Thread:
    """The owner side: look for requests every ``WATCH_INTERVAL_S`` until ``stop_event``."""
    stop_event = stop_event or threading.Event()
    folder = request_dir()  # resolved now: the home of this session, even if the env changes later

    def loop() -> None:
        while not stop_event.wait(WATCH_INTERVAL_S):
            try:
                for delegation_id in act_on_requests(folder):
                    logger.info("stopped %s on request", delegation_id)
            except Exception:  # the watcher must never die of one bad entry
                logger.exception("acting on stop requests failed")
    thread = threading.Thread(target=loop, name="offload-stop-requests", daemon=True)
    thread.start()
    return thread
