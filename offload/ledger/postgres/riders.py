"""Completions that ride the next dispatch's round trip (issue 31).

While a process is dispatching (a dispatch was sent within ``WINDOW_S``), a unit's completion
does not make its own round trip and commit at once: it waits up to ``WAIT_S`` for the next
dispatch, which sends it first in the same statement and transaction (``postgres.functions``),
then hands each rider its function's result. Two writes then cost the server one round trip,
one commit and one WAL flush instead of two, and both ends less CPU; a dispatcher never waits
for anyone (it carries only what is queued when it sends, never an exchange in flight). A
completion that finds no recent dispatch, or no carrier within ``WAIT_S``, sends itself.

Invariants: a rider is either taken by exactly one carrier or withdrawn by its own thread,
never both (``_lock``); a carrier answers every rider it took, whatever happens to its own
write (the function's result once the transaction committed, else ``RETRY``), so no rider
waits forever and a completion is acknowledged only once a transaction holding it committed.
A ``RETRY`` after a lost connection may follow a commit the carrier never heard of: the
completion sent again then finds its row no longer running and changes nothing.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

WINDOW_S = 0.005  # a dispatch this recent means another is likely to follow
WAIT_S = 0.002  # how long a completion waits for one before it sends itself
RETRY = object()  # the carrier's transaction did not commit: the rider sends itself


@dataclass(eq=False)
class Rider:
    params: Sequence[Any]
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Any = RETRY  # the function's result, or ``RETRY``

    def answer(self, outcome: Any) -> None:
        self.outcome = outcome
        self.done.set()


class Riders:
    """One ledger's queue of completions waiting for a carrier."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Rider] = []
        self._dispatched_at = float("-inf")

    def ride(self, params: Sequence[Any]) -> Any:
        """The completion's function result once a dispatch carried it; ``RETRY`` if nobody
        did (send it yourself)."""
        if time.monotonic() - self._dispatched_at > WINDOW_S:
            return RETRY
        rider = Rider(params)
        with self._lock:
            self._queue.append(rider)
        if not rider.done.wait(WAIT_S):
            with self._lock:
                if rider in self._queue:  # no carrier came: withdraw
                    self._queue.remove(rider)
                    return RETRY
            rider.done.wait()  # a carrier took it just now: its answer follows its round trip
        return rider.outcome

    def take(self) -> list[Rider]:
        """For a dispatch about to be sent: the completions queued now (each to be answered)."""
        with self._lock:
            self._dispatched_at = time.monotonic()
            taken, self._queue = self._queue, []
        return taken
