"""The completion bus: one ``completion_queue`` for every background event type, lazy
replay of the durable ledger, and ownership-filtered draining.

Ownership rules (``drain_notifications``): a consumer takes only the events it owns. With an
``owns_event`` predicate, only what it accepts (a raising predicate means "not mine"); with
a ``session_key``, only events of that session; with no filter, everything except events
restored from a previous process — those wait for a consumer that can prove ownership, or a
new session would adopt a dead session's results. Unowned events go back on the queue.
Restore runs once per process, on the first consumer, never at import; after that each drain
may run a rate-limited orphan sweep, so a result whose owner or claiming consumer died while
we run is offered again once its claim lease has expired.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

from tools import async_delegation_delivery as _delivery

logger = logging.getLogger(__name__)

Event = dict[str, Any]


class CompletionBus:
    _completions_restored = False  # class default: registries built with __new__ still restore

    def __init__(self) -> None:
        self.completion_queue: queue.Queue[Event] = queue.Queue()
        self._restore_lock = threading.Lock()

    def restore_completions(self) -> int:
        """Replay undelivered completions from the ledger, once per process."""
        lock = getattr(self, "_restore_lock", None) or threading.Lock()
        with lock:
            if self._completions_restored:
                return 0
            self._completions_restored = True  # set first: a failure is logged, not retried
        try:
            return _delivery.restore_undelivered_completions(self.completion_queue)
        except Exception:
            logger.exception("Could not restore async delegation completions")
            return 0

    def _sweep_orphans(self) -> None:
        """Re-offer results whose owner or claiming consumer died while we run (rate-limited)."""
        try:
            _delivery.maybe_sweep_orphaned_completions(self.completion_queue)
        except Exception:
            logger.debug("orphan sweep failed", exc_info=True)

    def drain_notifications(self, session_key: str = "",
                            owns_event: Callable[[Event], bool] | None = None) -> list[tuple[Event, str | None]]:
        """Take every event this consumer owns, rendered; put the rest back."""
        from tools.process_registry_notifications import format_process_notification

        self.restore_completions()
        self._sweep_orphans()
        taken: list[Event] = []
        others: list[Event] = []
        while True:
            try:
                evt = self.completion_queue.get_nowait()
            except queue.Empty:
                break
            (taken if _owns(evt, session_key, owns_event) else others).append(evt)
        for evt in others:
            self.completion_queue.put(evt)
        return [(evt, format_process_notification(evt)) for evt in taken]


def _owns(evt: Event, session_key: str, owns_event: Callable[[Event], bool] | None) -> bool:
    needs_proof = evt.get("type") == "async_delegation" or bool(evt.get("session_key") or evt.get("origin_ui_session_id"))
    if not needs_proof:
        return True
    if owns_event is not None:
        try:
            return bool(owns_event(evt))
        except Exception:
            return False  # fail closed: a broken predicate must not steal another session's result
    if session_key:
        return evt.get("session_key") == session_key
    return not evt.get("restored")


# The hermes name: it once also tracked background processes; it is the completion bus.
ProcessRegistry = CompletionBus
process_registry = CompletionBus()
