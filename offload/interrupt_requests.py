"""Interrupting a unit that another offload process on this machine runs.

An interrupt reaches a child only through the engine of the process running it. So a
process that wants to stop someone else's unit (the dashboard) leaves a request: an empty
file ``$HERMES_HOME/interrupt-requests/<delegation id>``. Every offload command installs the
poller (``install()``, from the CLI's entry point): while its process has live units it looks
at that directory every ``POLL_S`` and interrupts the units it runs, through the same engine
call as ``/stop``, then removes the request. Requests nobody claims are removed after
``MAX_AGE_S``.

Invariants: the poller thread runs only while this process has live units (started by the
engine's ``dispatched`` notification, exits when none are left); a missing directory costs
one failed ``scandir`` per poll; a request never names a path outside the directory.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from delegation.observers import add_observer
from tools import async_delegation as engine
from tools.hermes_home import get_hermes_home

logger = logging.getLogger(__name__)

POLL_S = 0.5
MAX_AGE_S = 3600.0
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_LIVE = ("running", "stalling")


def request_dir() -> Path:
    return get_hermes_home() / "interrupt-requests"


def request(delegation_id: str) -> Path:
    """Leave an interrupt request for the process that runs ``delegation_id``."""
    if not _SAFE_ID.match(delegation_id) or delegation_id.startswith("."):
        raise ValueError(f"{delegation_id!r} is not a delegation id")
    directory = request_dir()
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / delegation_id
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    os.utime(path)  # a repeated request starts its age again
    return path


def take(owned: set[str], now: float) -> list[str]:
    """Remove and return the requests for ``owned`` units; remove requests past ``MAX_AGE_S``."""
    taken = []
    try:
        entries = list(os.scandir(request_dir()))
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.name in owned:
                os.unlink(entry.path)
                taken.append(entry.name)
            elif now - entry.stat().st_mtime > MAX_AGE_S:
                os.unlink(entry.path)
        except OSError:
            continue  # another process took it first
    return taken


def poll_once(now: float | None = None) -> int:
    """Interrupt this process's units that have a request; returns how many were signalled."""
    if not _has_requests():
        return 0
    owned = {i["delegation_id"] for i in engine.list_async_delegations() if i.get("status") in _LIVE}
    signalled = 0
    for delegation_id in take(owned, time.time() if now is None else now):
        signalled += engine.interrupt_delegation(delegation_id, reason="interrupt request")
    return signalled


def _has_requests() -> bool:
    try:
        with os.scandir(request_dir()) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


class _Poller:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def __call__(self, kind: str, delegation_id: str, fields: dict[str, Any]) -> None:
        if kind != "dispatched":
            return
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="offload-interrupt-requests", daemon=True)
                self.thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(POLL_S)
            try:
                poll_once()
            except Exception:  # the poller outlives a bad request or a vanished home
                logger.debug("interrupt request poll failed", exc_info=True)
            with self.lock:
                if engine.active_count() == 0:  # re-checked under the lock a dispatch takes to start us
                    self.thread = None
                    return


_poller: _Poller | None = None


def install() -> None:
    """Honour interrupt requests for units this process runs (idempotent)."""
    global _poller
    if _poller is None:
        _poller = _Poller()
        add_observer(_poller)
