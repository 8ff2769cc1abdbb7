"""The engine's side of handing running units over to another process (issue 44, point 4): the
safe point at which a leaving process's children stop, and the silence of a unit it gave away.

While a hand-over is under way (``begin``), a child of a unit being handed over that is about to
write its next model reply or the start mark of its next side-effecting tool call is parked
there (``parks``/``park``, asked by ``engine.unit_progress`` before each write): that is its
safe point -- nothing it did is lost (its last reply and results are logged) and nothing new
starts. A tool call already running may finish and write its result
(``wait_quiet`` waits for that, within a bound). Once the units are handed over (``release``) the
parked children go on into the ledger, which refuses their writes (the owner epoch on SQLite, the
lease token on PostgreSQL), so each stops; the model reply a parked child held is dropped and
issued again by the taker (the one cost paid twice). A unit handed over finalizes silently here:
its event is neither recorded nor published (``was_handed``), the taker reports it.

Invariant: only units named to ``begin`` are parked, never longer than ``PARK_MAX_S``; an
inline child (no step log) is never touched.
"""
from __future__ import annotations

import threading
import time

PARK_MAX_S = 30.0  # a parked child goes on anyway after this (a hand-over that never released)
QUIET_POLL_S = 0.02
_PARKED_KINDS = ("reply", "tool_start")


class HandOver:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, set[tuple[int, str]]] = {}  # unit -> side-effecting calls running now
        self._leaving: set[str] = set()  # units being handed over
        self._handed: set[str] = set()  # units handed over: they finalize silently
        self._released = threading.Event()

    def parks(self, delegation_id: str, kind: str) -> bool:
        """Whether a step of this kind must wait here: its unit is being handed over."""
        with self._lock:
            return delegation_id in self._leaving and kind in _PARKED_KINDS

    def park(self) -> None:
        self._released.wait(PARK_MAX_S)

    def track(self, delegation_id: str, task_index: int, steps: list[tuple[int, str, dict]], kind: str) -> None:
        """Note the side-effecting calls these steps start (``kind`` "tool_start", before their
        write) or whose results they hold ("tool_result", after it)."""
        calls = {(task_index, str(payload.get("call_id"))) for _, k, payload in steps if k == kind}
        with self._lock:
            running = self._open.setdefault(delegation_id, set())
            if kind == "tool_start":
                running |= calls
            else:
                running -= calls

    def forget(self, delegation_id: str) -> None:
        with self._lock:
            self._open.pop(delegation_id, None)

    def begin(self, delegation_ids: list[str]) -> None:
        """A hand-over of these units starts: their children park at their next safe point (a
        process may hand over more than once: a signal's, then its own exit's)."""
        with self._lock:
            self._leaving.update(delegation_ids)
            self._released.clear()

    def wait_quiet(self, delegation_ids: list[str], deadline: float) -> bool:
        """Wait (until monotonic ``deadline``) for the running side-effecting calls of these
        units to write their results; True if none is running any more."""
        while True:
            with self._lock:
                running = any(self._open.get(did) for did in delegation_ids)
            if not running or time.monotonic() >= deadline:
                return not running
            time.sleep(QUIET_POLL_S)

    def handed(self, delegation_id: str) -> None:
        with self._lock:
            self._handed.add(delegation_id)

    def was_handed(self, delegation_id: str) -> bool:
        with self._lock:
            return delegation_id in self._handed

    def release(self) -> None:
        """The units are handed over (or the hand-over gave up): parked children go on, and none
        parks again until the next ``begin``."""
        with self._lock:
            self._leaving.clear()
            self._released.set()
