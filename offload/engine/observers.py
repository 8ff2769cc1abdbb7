"""The engine's one extension point for telemetry: observers told what happens to a unit.

The engine (``offload.engine.engine``, ``offload.engine.delivery``) calls ``notify(kind, delegation_id, **fields)`` at a few moments (see ``KINDS``);
metrics and tracing (``offload.telemetry``) register with ``add_observer``; work the engine
does not see (subagents, model and tool calls) opens ``span(...)``. So the engine
never imports a telemetry library, and with no observer registered a notification costs one
function call and an empty-list check.

Invariants: an observer can never break the engine (its exceptions are logged at debug and
swallowed); observers run on the engine's thread, outside every engine lock, and must be
quick. ``record`` fields are the engine's live dict: observers may add private keys to it
(prefixed ``_obs``) but must not change the others.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, ContextManager, Protocol

logger = logging.getLogger("offload.engine")

KINDS = (
    "dispatching",  # record= (before the ledger row is written: an observer may add "trace_context")
    "dispatched",  # record=
    "started",  # record=; called on the worker thread inside the unit's context, before the runner
    "child_recorded",  # entry=
    "finalized",  # record=, status=, event=
    "stalled",  # quiet_s=, in_tool=
    "interrupted",  # reason=
    "recovered",  # row=, event=
    "delivery",  # outcome= claimed | delivered | released | deferred | dropped | acknowledged
    "ledger_error",  # kind=, op=
)
Observer = Callable[[str, str, dict[str, Any]], None]
_observers: list[Observer] = []


class SpanHandle(Protocol):
    def set(self, **attributes: Any) -> None: ...

    def fail(self, description: str) -> None:
        """Mark the span's work as failed (OpenTelemetry status ERROR), with why."""


class _NoSpan:
    def set(self, **attributes: Any) -> None:
        pass

    def fail(self, description: str) -> None:
        pass


SpanFactory = Callable[[str, dict[str, Any]], ContextManager[SpanHandle]]
_OFF: ContextManager[SpanHandle] = contextlib.nullcontext(_NoSpan())
_span_factory: SpanFactory | None = None
EventSink = Callable[[str, dict[str, Any]], None]
_event_sink: EventSink | None = None
Continuing = Callable[[Any], ContextManager[None]]
_continuing: Continuing | None = None
_carrier: Callable[[], dict[str, str]] | None = None


def add_observer(observer: Observer) -> Callable[[], None]:
    """Register ``observer(kind, delegation_id, fields)``; returns a function that removes it."""
    _observers.append(observer)
    return lambda: _observers.remove(observer) if observer in _observers else None


def notify(kind: str, delegation_id: str, /, **fields: Any) -> None:
    if not _observers:
        return
    for observer in tuple(_observers):
        try:
            observer(kind, delegation_id, fields)
        except Exception:
            logger.debug("observer %r failed on %s of %s", observer, kind, delegation_id, exc_info=True)


def set_span_factory(factory: SpanFactory | None, event_sink: EventSink | None = None,
                     continuing: Continuing | None = None, carrier: Callable[[], dict[str, str]] | None = None) -> None:
    """Tracing installs its span factory here, what adds an event to the current span, what
    continues a stored trace context and what captures the current one; None turns them off."""
    global _span_factory, _event_sink, _continuing, _carrier
    _span_factory, _event_sink, _continuing, _carrier = factory, event_sink, continuing, carrier


def trace_carrier() -> dict[str, str]:
    """The current trace context as a W3C carrier (``traceparent``) to store with queued work;
    empty when tracing is off."""
    capture = _carrier
    return capture() if capture is not None else {}


def continuing(carrier: Any) -> ContextManager[None]:
    """Run the body under the trace context ``carrier`` names (``trace_carrier`` of another
    process): what a worker does around dispatching a queued unit. A no-op when tracing is off."""
    enter = _continuing
    return contextlib.nullcontext() if enter is None or not carrier else enter(carrier)


def span_event(name: str, **attributes: Any) -> None:
    """An event on the current span (``retry`` in a model call), or nothing when tracing is off."""
    sink = _event_sink
    if sink is not None:
        sink(name, attributes)


def span(name: str, **attributes: Any) -> ContextManager[SpanHandle]:
    """``with span("offload.model_call", model=m) as s: ...; s.set(prompt_tokens=n)``: a child
    span of whatever is current (a unit, a subagent) when tracing is on, a shared no-op when off.
    Used where work happens below the engine's view: subagents, model calls, tool calls."""
    factory = _span_factory
    return _OFF if factory is None else factory(name, attributes)
