"""GatewayRunner: delivers background-delegation results back to the chat they came from.

Owns three things: routing enrichment (the event's Origin -> platform/chat/thread on it), the
gateway's choice of text per event type (``gateway_text``, over the runtime's renderer), and the
delivery step ``deliver_pending(drain)``: drain -> enrich -> group per route -> one turn per
group -> ``adapter.send``. The loop around that step, with delivery claims, is
``offload.gateway.bus.GatewayBus.tick``.

Invariants:
- Nothing is dropped. Every drained event lands in exactly one of ``DeliveryOutcome.delivered``
  (an adapter accepted it: the caller completes its delivery claim) or
  ``DeliveryOutcome.undelivered`` (not ours, unroutable, no adapter, refused, or the adapter
  raised: the caller releases its claim and requeues it on the completion bus).
- A group is all-or-nothing: one adapter call carries every event of one route, so a turn is
  never half delivered.
- The completion bus and the engine are not imported here; the caller passes the bus's drain
  (and the runtime's renderer) in. That keeps the gateway testable with a fake bus.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol

from offload.origin import Origin
from offload.render.notification import format_event

logger = logging.getLogger(__name__)

Event = dict[str, Any]
Drain = Callable[[], Iterable[tuple[Event, "str | None"]]]
Render = Callable[[Event], "str | None"]

BATCH_PREFIX = (
    "[IMPORTANT: {n} background subagent delegations completed for this session. Treat these "
    "results as one completion batch and send at most one consolidated user-facing response. "
    "If a result does not change the current conclusion, absorb it silently.]"
)
# The parent turn a result belongs to: results for the same chat, thread, parent session and
# user become one turn; anything that differs must not be merged (#70300).
ROUTE_FIELDS = (
    "session_key", "parent_session_id", "platform", "chat_type", "chat_id", "thread_id", "user_id",
)


class Adapter(Protocol):
    """A chat platform. ``send`` returns True only once the platform accepted the message."""

    def send(self, chat_id: str, text: str, thread_id: str | None = None) -> bool: ...


@dataclass
class DeliveryOutcome:
    """Result of one ``deliver_pending`` call; see the module docstring for what to do next."""

    delivered: list[Event] = field(default_factory=list)
    undelivered: list[Event] = field(default_factory=list)

    @property
    def delivered_count(self) -> int:
        return len(self.delivered)


def gateway_text(evt: Event, render: Render = format_event) -> str | None:
    """Text the gateway injects for *evt* (rendered by ``render``, the runtime's renderer), or
    None when another consumer owns the type (the gateway delivers ``async_delegation`` events;
    any other type is left to its own consumer)."""
    if isinstance(evt, dict) and evt.get("type") == "async_delegation":
        return render(evt)
    return None


def enrich_async_delegation_routing(evt: Event) -> None:
    """Fill platform/chat_type/chat_id[/thread_id] from the event's ``Origin`` (its chat, captured
    at the tool call; an event of a previous version: parsed from ``session_key``) unless already
    routed. An origin without a chat (CLI or desktop) leaves the event without ``platform``.
    """
    if evt.get("platform"):
        return
    route = Origin.of_event(evt).chat()
    if route:
        evt.update(route)


def _route_key(evt: Event) -> tuple[Any, ...]:
    # Interim failure notices are early warnings, not completions: keep them out of the
    # "N delegations completed" batch of the same chat.
    return (*(str(evt.get(name) or "") for name in ROUTE_FIELDS), bool(evt.get("task_failure_notice")))


def _group_text(members: list[tuple[Event, str]]) -> str:
    texts = [text for _, text in members]
    if len(texts) == 1:
        return texts[0]
    body = "\n\n".join(texts)
    if members[0][0].get("task_failure_notice"):
        return body
    return BATCH_PREFIX.format(n=len(texts)) + "\n\n" + body


class GatewayRunner:
    """Routes completion-bus results to platform adapters.

    Methods that only transform an event do not touch instance state, so they work on an
    instance made with ``object.__new__(GatewayRunner)``.
    """

    render: Render = staticmethod(format_event)  # the class default: instances made with __new__ render too

    def __init__(self, adapters: Mapping[str, Adapter] | None = None, render: Render | None = None) -> None:
        self.adapters: dict[str, Adapter] = dict(adapters or {})
        if render is not None:
            self.render = render

    def _enrich_async_delegation_routing(self, evt: Event) -> None:
        enrich_async_delegation_routing(evt)

    def deliver_pending(self, drain: Drain) -> DeliveryOutcome:
        """Drain once and deliver every async-delegation event, one turn per route."""
        outcome = DeliveryOutcome()
        groups: dict[tuple[Any, ...], list[tuple[Event, str]]] = {}
        # Materialize first: a drain that fails halfway must fail before we own any event.
        for evt, text in list(drain()):
            if not isinstance(evt, dict) or evt.get("type") != "async_delegation":
                outcome.undelivered.append(evt)  # another consumer's event: hand it back
                continue
            self._enrich_async_delegation_routing(evt)
            text = text or gateway_text(evt, self.render)
            if not evt.get("platform") or not text:
                outcome.undelivered.append(evt)  # CLI/desktop origin: the CLI consumer owns it
                continue
            groups.setdefault(_route_key(evt), []).append((evt, text))
        for members in groups.values():
            self._deliver_group(members, outcome)
        return outcome

    def _deliver_group(self, members: list[tuple[Event, str]], outcome: DeliveryOutcome) -> None:
        events = [evt for evt, _ in members]
        primary = events[0]
        adapter = self.adapters.get(primary["platform"])
        accepted = False
        if adapter is not None:
            try:
                # Only a literal True counts: acceptance is what lets the caller complete claims.
                accepted = adapter.send(primary["chat_id"], _group_text(members),
                                        thread_id=primary.get("thread_id") or None) is True
            except Exception:
                logger.exception("adapter %r failed to deliver %d delegation result(s); requeueing",
                                 primary["platform"], len(events))
        (outcome.delivered if accepted else outcome.undelivered).extend(events)
