"""The consumer side of the completion bus for ONE session (the CLI's inbox).

``SessionInbox.poll()`` drains the events this session owns (the event's ``Origin`` names the
session id as its key, parent or wake session; restored events of a previous process are included,
because ownership is proven by that id), claims each in the ledger and hands back the ones
to inject. The caller injects each as a new turn, and only AFTER the turn is stored (and did
not fail) calls ``acknowledge`` (completes the claim). If the turn failed it calls
``retry_later``: the claim is given back unacknowledged — with no attempt spent when the
parent's model endpoint was the failure (an outage must not use up a result's attempts) — and
the inbox holds the result back for a growing delay (``RETRY_FIRST_S`` doubling up to
``RETRY_MAX_S``) before it offers it again, never in a tight loop.

A session that was compressed continues under a new id; results dispatched before that are
owned by the live session at the tip of the lineage (``SessionStore.live_tip``).

Invariants: delivery is at least once and deduplicated by delegation id — an event whose
result a stored turn already carries (a crash hit between "turn stored" and "claim
completed") is only acknowledged, never injected again; an event another consumer holds a
live claim on is left to it. The first poll replays the ledger (lazily, through the
runtime's ``bus.restore_completions``).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from offload.agent.session_store import SessionStore
from offload.engine.events import is_interim
from offload.origin import Origin

if TYPE_CHECKING:
    from offload.engine.bus import CompletionBus
    from offload.engine.delivery import Deliveries

logger = logging.getLogger(__name__)

CONSUMER = "cli"
Event = dict[str, Any]
RETRY_FIRST_S = 2.0  # the first wait before a result whose turn failed is offered again
RETRY_MAX_S = 60.0


@dataclass
class Delivery:
    """One result to inject: the event, the text the parent reads, and the claim to settle."""

    event: Event
    text: str
    claim: str  # "" when the event needs no claim (e.g. an interim failure notice)

    @property
    def delegation_id(self) -> str:
        return str(self.event.get("delegation_id") or "")

    @property
    def dedupe_id(self) -> str | None:
        """The id a stored turn records; interim notices are not the result, so they have none."""
        if is_interim(self.event) or self.event.get("type") != "async_delegation":
            return None
        return self.delegation_id or None


class Runtime(Protocol):
    """What an inbox takes from its ``offload.Offload``: the completion bus it drains and the
    deliveries it claims through (named here, so the inbox does not know the runtime's module,
    whose public API delivers through it)."""

    bus: CompletionBus
    deliveries: Deliveries


class SessionInbox:
    def __init__(self, session_id: str, store: SessionStore, runtime: Runtime,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session_id = session_id
        self.clock = clock
        self.store = store
        self.registry = runtime.bus
        self.deliveries = runtime.deliveries
        self._held: dict[str, tuple[Event, str, float]] = {}  # delegation id -> (event, text, offered again at)
        self._failures: dict[str, int] = {}  # delegation id -> turns on it that failed in a row

    def owns(self, evt: Event) -> bool:
        """Whether this session should receive ``evt``: it names this session, or a session whose
        compression lineage ends here. An unresolvable lineage (or a store error, which the bus
        treats as "not mine") leaves the result pending for a later poll; never a guess."""
        origin = Origin.of_event(evt)
        if origin.belongs_to(self.session_id):
            return True
        anchor = origin.parent_session_id or origin.wake_session_id
        return bool(anchor) and self.store.live_tip(str(anchor)) == self.session_id

    def _already_injected(self, delegation_id: str) -> bool:
        """A stored turn of this session, or of one it was compressed out of, carries the result."""
        return any(self.store.was_injected(sid, delegation_id) for sid in self.store.lineage(self.session_id))

    def follow(self, session_id: str) -> None:
        """The conversation moved on (compression, or a new session): own what the new id owns."""
        self.session_id = session_id

    def poll(self) -> list[Delivery]:
        """Claim and return every owned result that is ready; never blocks on the bus."""
        ready: list[Delivery] = []
        drained = self.registry.drain_notifications(session_key=self.session_id, owns_event=self.owns)
        for evt, text in self._due() + [(e, t) for e, t in drained if e.get("delegation_id") not in self._held]:
            claim = self.deliveries.claim_event(evt, CONSUMER)
            if claim is None:
                logger.info("delegation %s is being delivered by another consumer", evt.get("delegation_id"))
                continue
            item = Delivery(evt, text or "", claim)
            if item.dedupe_id and self._already_injected(item.dedupe_id):
                self.acknowledge(item)  # stored before a crash; only the acknowledgement was lost
                continue
            if not item.text:  # only non-delegation events can lack text: nothing to show
                logger.debug("dropping an unrenderable %s event", evt.get("type"))
                self.acknowledge(item)
                continue
            ready.append(item)
        return ready

    def _due(self) -> list[tuple[Event, str]]:
        """Held results whose retry delay has passed, taken off the hold."""
        now = self.clock()
        due = [did for did, (_, _, at) in self._held.items() if at <= now]
        return [self._held.pop(did)[:2] for did in due]

    @property
    def held(self) -> set[str]:
        """Delegation ids held back for a retry after the turn on them failed."""
        return set(self._held)

    def retry_later(self, item: Delivery, *, outage: bool) -> float | None:
        """The turn carrying ``item`` failed: give the claim back unacknowledged and hold the
        result for a growing delay. ``outage``: the parent's endpoint failed, so no attempt is
        spent. Returns the delay, or None when nothing is held (its last attempt was spent, or
        it was an interim notice, which is not retried)."""
        if outage:
            self.deliveries.defer_event(item.event, item.claim)
        elif self.deliveries.release_event(item.event, item.claim, "the turn that carried it failed") == "dropped":
            return None
        if not item.dedupe_id:
            return None
        failures = self._failures[item.delegation_id] = self._failures.get(item.delegation_id, 0) + 1
        delay_s = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (failures - 1))
        self._held[item.delegation_id] = (item.event, item.text, self.clock() + delay_s)
        return delay_s

    def acknowledge(self, item: Delivery) -> None:
        """The turn carrying ``item`` is stored and succeeded: settle the claim."""
        self._failures.pop(item.delegation_id, None)
        if item.claim and not self.deliveries.complete_event(item.event, item.claim):
            # The lease ran out and the row moved on; the stored turn is what counts.
            self.deliveries.mark_delivered(item.delegation_id)

    def give_back(self, item: Delivery) -> None:
        """Injecting failed: release the claim and put the event back for a later poll."""
        state = self.deliveries.release_event(item.event, item.claim)
        if state != "dropped":
            self.registry.completion_queue.put(item.event)
