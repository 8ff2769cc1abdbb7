"""The gateway's delivery watcher: completion bus -> claimed batches -> each chat's worker.

One ``tick``: drain the events whose ``Origin`` routes to this platform (restored events of a
dead process included — the origin, carried whole from the tool call through the ledger, proves
the chat), buffer them per chat (the origin's session key), and for
every chat whose agent is idle and whose backoff has passed, claim the buffered events in the
ledger and hand them over as ONE batch (coalescing). An event another consumer holds is
forgotten here (that consumer delivers it; if it dies, the lease expires and the orphan sweep
offers it again). A batch given back for a retry is released (one attempt spent; the ledger
drops it after the attempt budget; none when the parent's model endpoint was down) and rebuffered with exponential backoff for that chat. A
result for a chat no longer on the allow-list (replayed after a config change) is dropped
with that reason, never shown.

Invariant: between a claim and its settlement exactly one chat worker owns the result, so two
watchers (two gateway processes on one ledger) never show one result twice.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from offload.gateway.chat_session import ChatSession, Claimed
from offload.gateway.platform import Route
from offload.origin import Origin
from offload.engine.bus import CompletionBus
from offload.engine.delivery import Deliveries
from offload.engine.events import is_interim

logger = logging.getLogger(__name__)
Event = dict[str, Any]


@dataclass
class _Pending:
    events: list[tuple[Event, str]] = field(default_factory=list)
    origin: Origin = Origin()  # the chat's: where its worker replies
    not_before: float = 0.0  # monotonic time of the next allowed handover
    failures: int = 0


class DeliveryWatcher:
    def __init__(self, platform_name: str, registry: CompletionBus, deliveries: Deliveries,
                 chat_for: Callable[[str, Route, str], ChatSession], consumer: str = "gateway",
                 backoff_s: float = 2.0, max_backoff_s: float = 300.0,
                 allowed: Callable[[str], bool] = lambda chat_id: True, allowed_key: str = "") -> None:
        self.platform_name, self.registry, self.chat_for, self.allowed = platform_name, registry, chat_for, allowed
        self.allowed_key = allowed_key or f"gateway.{platform_name}.allowed_chat_ids"  # named in a drop reason
        self.deliveries = deliveries  # the runtime's claim protocol
        self.consumer, self.backoff_s, self.max_backoff_s = consumer, backoff_s, max_backoff_s
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    def owns(self, evt: Event) -> bool:
        route = Origin.of_event(evt).chat()
        return evt.get("type") == "async_delegation" and route is not None and route["platform"] == self.platform_name

    def tick(self, now: float | None = None) -> int:
        """Hand over what is ready; returns how many results went to chat workers."""
        now = time.monotonic() if now is None else now
        for evt, text in self.registry.drain_notifications(owns_event=self.owns):
            origin = Origin.of_event(evt)
            if not self.allowed(origin.chat_id):
                self._drop_unserved(evt, origin)
            elif text:
                with self._lock:
                    pending = self._pending.setdefault(origin.session_key, _Pending(origin=origin))
                    pending.events.append((evt, text))
        handed = 0
        for key in self._ready_keys(now):
            handed += self._hand_over(key)
        return handed

    def _drop_unserved(self, evt: Event, origin: Origin) -> None:
        """A result (replayed from before a config change) for a chat no longer served."""
        if is_interim(evt):
            return  # an early warning: dropping it must not drop the unit's result row
        claim = self.deliveries.claim_event(evt, self.consumer)
        if claim is None:
            return  # another gateway, perhaps still serving that chat, holds it
        did = str(evt.get("delegation_id") or "")
        self.deliveries.drop(did, claim or None, f"chat {origin.chat_id} is not in {self.allowed_key}")

    def _ready_keys(self, now: float) -> list[str]:
        with self._lock:
            return [k for k, p in self._pending.items() if p.events and p.not_before <= now]

    def _hand_over(self, key: str) -> int:
        origin = self._pending[key].origin
        chat = self.chat_for(key, Route(origin.chat_id, origin.thread_id), origin.chat_type or "dm")
        if not chat.idle:
            return 0  # results become a turn only when the chat's agent is idle; keep buffering
        with self._lock:
            pending = self._pending[key]
            events, pending.events = pending.events, []
        batch = []
        for evt, text in events:
            claim = self.deliveries.claim_event(evt, self.consumer)
            if claim is None:
                logger.info("delegation %s is being delivered by another consumer", evt.get("delegation_id"))
                continue
            batch.append(Claimed(evt, text, claim, self.deliveries, self._shown_parts(evt, claim)))
        if batch:
            chat.submit_results(batch)
        return len(batch)

    def batch_done(self, key: str, batch: list[Claimed], outcome: str, now: float | None = None) -> None:
        """Called by a chat worker: ``done`` settles the chat's backoff, ``retry`` (an attempt
        spent) or ``outage`` (none spent: the parent's endpoint failed) schedules one."""
        now = time.monotonic() if now is None else now
        with self._lock:
            origin = Origin.of_event(batch[0].event) if batch else Origin()
            pending = self._pending.setdefault(key, _Pending(origin=origin))
            if outcome == "done":
                pending.failures = 0
                return
            pending.failures += 1
            delay_s = min(self.max_backoff_s, self.backoff_s * 2 ** (pending.failures - 1))
            pending.not_before = now + delay_s
        for item in batch:
            if outcome == "outage":  # the parent's endpoint failed, not the result: no attempt spent
                self.deliveries.defer_event(item.event, item.claim)
                with self._lock:
                    pending.events.append((item.event, item.text))
            elif self.deliveries.release_event(item.event, item.claim, "the chat could not be reached") != "dropped":
                with self._lock:
                    pending.events.append((item.event, item.text))

    def _shown_parts(self, evt: Event, claim: str) -> int:
        """How many parts of this result an earlier attempt showed (it resumes after them)."""
        if not claim:
            return 0  # an interim notice: nothing durable
        return int((self.deliveries.get(str(evt.get("delegation_id"))) or {}).get("delivery_progress") or 0)

    def pending_count(self) -> int:
        with self._lock:
            return sum(len(p.events) for p in self._pending.values())

    def run(self, stop: threading.Event, interval_s: float = 0.3) -> None:
        """The tiny loop: tick until ``stop``; a failing tick is logged, never fatal."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                logger.exception("gateway delivery tick failed")
            stop.wait(interval_s)
