"""The gateway's consumer of the completion bus, with durable delivery claims.

One tick: drain the events the gateway can route (a parseable chat session key), claim each
in the ledger (an event another consumer holds is put back untouched), hand the claimed ones
to ``GatewayRunner.deliver_pending``, then complete the claims of what an adapter accepted
and release (and requeue) the rest. So a result is delivered at least once, never by two
consumers at once, and a gateway that dies mid-delivery leaves it claimable after the lease.
"""
from __future__ import annotations

import logging
from typing import Any

from offload.engine.bus import CompletionBus
from offload.engine.delivery import Deliveries
from offload.gateway.runner import GatewayRunner, enrich_async_delegation_routing
from offload.origin import Origin

logger = logging.getLogger(__name__)
Event = dict[str, Any]


def _routable(evt: Event) -> bool:
    return evt.get("type") == "async_delegation" and (
        bool(evt.get("platform")) or Origin.of_event(evt).chat() is not None)


class GatewayBus:
    def __init__(self, runner: GatewayRunner, registry: CompletionBus, deliveries: Deliveries,
                 consumer: str = "gateway") -> None:
        self.runner, self.registry, self.deliveries, self.consumer = runner, registry, deliveries, consumer

    def tick(self) -> int:
        """Deliver what is ready; returns how many results an adapter accepted."""
        claims: dict[int, str] = {}
        claimed: list[tuple[Event, str | None]] = []
        for evt, text in self.registry.drain_notifications(owns_event=_routable):
            claim = self.deliveries.claim_event(evt, self.consumer)
            if claim is None:
                self.registry.completion_queue.put(evt)  # another consumer is delivering it
                continue
            enrich_async_delegation_routing(evt)
            claims[id(evt)] = claim
            claimed.append((evt, text))
        outcome = self.runner.deliver_pending(lambda: claimed)
        for evt in outcome.delivered:
            self.deliveries.complete_event(evt, claims.get(id(evt)))
        for evt in outcome.undelivered:
            state = self.deliveries.release_event(evt, claims.get(id(evt)))
            if state != "dropped":
                self.registry.completion_queue.put(evt)
        return outcome.delivered_count
