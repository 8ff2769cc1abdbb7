"""``RecentIds``: a bounded set of the ids added last (the ids of units a runtime published on
its own bus, ``offload.runtime``). Invariant: it never holds more than ``keep`` ids; the oldest
go first."""
from __future__ import annotations

import threading


class RecentIds:
    """The last ``keep`` ids added, for membership tests (a long-lived runtime forgets the
    oldest; one forgotten while still pending is offered to its bus again, and its claim
    keeps that a duplicate of nothing)."""

    def __init__(self, keep: int) -> None:
        self._ids: dict[str, None] = {}
        self._keep = keep
        self._lock = threading.Lock()

    def add(self, item: str) -> None:
        with self._lock:
            self._ids.pop(item, None)
            self._ids[item] = None
            while len(self._ids) > self._keep:
                del self._ids[next(iter(self._ids))]

    def __contains__(self, item: object) -> bool:
        return item in self._ids
