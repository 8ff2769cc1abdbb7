"""The finished children of this process's running units, kept so each child record writes the
unit's partial results whole (one fenced ``UPDATE``) instead of reading the row back first.

Invariant: the JSON written for a unit always holds every child recorded before it: children
of one unit record one at a time (``holding``: the unit's lock is held from building the JSON
until its write returned), so an older list never lands after a newer one. Only the process
running a unit writes its partial results (the row is fenced by its lease token), so what it
kept is what the row holds. A unit's entry goes when its completion is written or it is
forgotten.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

from offload.ledger.codec import dumps


class _Unit:
    __slots__ = ("lock", "children")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.children: dict[Any, dict[str, Any]] = {}  # task_index -> entry, in recording order


class UnitPartials:
    """Thread-safe; one per ledger."""

    def __init__(self) -> None:
        self._units: dict[str, _Unit] = {}
        self._lock = threading.Lock()

    @contextmanager
    def holding(self, delegation_id: str, entry: dict[str, Any]) -> Iterator[str]:
        """Record ``entry`` (replacing an earlier record of the same child) and yield the unit's
        partial ``result_json``; the unit's other child records wait until this block ends."""
        with self._lock:
            unit = self._units.setdefault(delegation_id, _Unit())
        with unit.lock:
            unit.children.pop(entry.get("task_index"), None)  # a re-recorded child moves to the end
            unit.children[entry.get("task_index")] = entry
            yield dumps({"results": list(unit.children.values()), "partial": True})

    def forget(self, delegation_id: str) -> None:
        with self._lock:
            self._units.pop(delegation_id, None)
