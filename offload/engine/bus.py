"""The completion bus: one ``completion_queue`` for every background event type, lazy
replay of the durable ledger, and ownership-filtered draining.

Ownership rules (``drain_notifications``): a consumer takes only the events it owns. With an
``owns_event`` predicate, only what it accepts (a raising predicate means "not mine"); with
a ``session_key``, only events of that session; with no filter, everything except events
restored from a previous process — those wait for a consumer that can prove ownership, or a
new session would adopt a dead session's results. Unowned events stay where they are: the
queue is an ``IndexedQueue`` (a ``queue.Queue`` indexed by session key), so a session
consumer takes its own events by key without touching the others', and N consumers cost
O(events), not O(N x events). A plain ``queue.Queue`` patched in still works (take all, put
back what is not ours).
Restore runs once per bus, on the first consumer, never at construction; after that each
drain may run a rate-limited orphan sweep, so a result whose owner or claiming consumer died
while we run is offered again once its claim lease has expired.

The bus knows no ledger and no renderer: its owner (``offload.runtime.Offload``) hands it
``restore(queue)``, ``sweep(queue)`` (its ``Deliveries``) and ``render(event)``. A bus built
without them is purely in memory (restore offers nothing, events render as None).
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

from offload.engine.bus_queue import PUBLIC, IndexedQueue, needs_proof, session_key_of

logger = logging.getLogger(__name__)

Event = dict[str, Any]
Offer = Callable[["queue.Queue[Event]"], int]


class CompletionBus:
    _completions_restored = False  # class default: registries built with __new__ still restore
    _restore_fn: Offer | None = None
    _sweep_fn: Offer | None = None
    _render_fn: Callable[[Event], "str | None"] | None = None

    def __init__(self, restore: Offer | None = None, sweep: Offer | None = None,
                 render: Callable[[Event], "str | None"] | None = None) -> None:
        self.completion_queue: queue.Queue[Event] = IndexedQueue()
        self._restore_lock = threading.Lock()
        self._restore_fn, self._sweep_fn, self._render_fn = restore, sweep, render

    # What the owner plugged in; a subclass (the hermes adapter) may route these elsewhere.
    def _restore(self, target: "queue.Queue[Event]") -> int:
        return self._restore_fn(target) if self._restore_fn is not None else 0

    def _sweep(self, target: "queue.Queue[Event]") -> int:
        return self._sweep_fn(target) if self._sweep_fn is not None else 0

    def render(self, evt: Event) -> str | None:
        """The parent-facing text of ``evt`` (None: no renderer, or a type nobody renders)."""
        return self._render_fn(evt) if self._render_fn is not None else None

    def restore_completions(self) -> int:
        """Replay undelivered completions from the ledger, once per bus."""
        lock = getattr(self, "_restore_lock", None) or threading.Lock()
        with lock:
            if self._completions_restored:
                return 0
            self._completions_restored = True  # set first: a failure is logged, not retried
        try:
            return self._restore(self.completion_queue)
        except Exception:
            logger.exception("Could not restore async delegation completions")
            return 0

    def _sweep_orphans(self) -> None:
        """Re-offer results whose owner or claiming consumer died while we run (rate-limited)."""
        try:
            self._sweep(self.completion_queue)
        except Exception:
            logger.debug("orphan sweep failed", exc_info=True)

    def drain_notifications(self, session_key: str = "",
                            owns_event: Callable[[Event], bool] | None = None) -> list[tuple[Event, str | None]]:
        """Take every event this consumer owns, rendered; leave the rest queued."""
        self.restore_completions()
        self._sweep_orphans()
        taken = _take_owned(self.completion_queue, lambda evt: _owns(evt, session_key, owns_event),
                            session_key if owns_event is None else "")
        return [(evt, self.render(evt)) for evt in taken]


def _take_owned(bus: queue.Queue, accept: Callable[[Event], bool], session_key: str) -> list[Event]:
    """The events ``accept`` takes, in queue order. With only a ``session_key`` to go by, just
    that key's events (and public ones) are looked at."""
    if isinstance(bus, IndexedQueue):
        return bus.take((PUBLIC, session_key_of(session_key)), accept) if session_key else bus.take_all(accept)
    taken: list[Event] = []
    others: list[Event] = []
    while True:
        try:
            evt = bus.get_nowait()
        except queue.Empty:
            break
        (taken if accept(evt) else others).append(evt)
    for evt in others:
        bus.put(evt)
    return taken


def _owns(evt: Event, session_key: str, owns_event: Callable[[Event], bool] | None) -> bool:
    if not needs_proof(evt):
        return True
    if owns_event is not None:
        try:
            return bool(owns_event(evt))
        except Exception:
            return False  # fail closed: a broken predicate must not steal another session's result
    if session_key:
        return evt.get("session_key") == session_key
    return not evt.get("restored")
