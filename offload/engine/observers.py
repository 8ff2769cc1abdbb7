"""The engine's one extension point for telemetry: observers told what happens to a unit.

The engine (``offload.engine.engine``, ``offload.engine.delivery``) calls ``notify(kind, delegation_id, **fields)`` at a few moments (see ``KINDS``);
metrics and tracing (``offload.telemetry``) register with ``add_observer``; work the engine
does not see (parent turns, subagents, model and tool calls) opens ``span(...)``. So the engine
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
    "finalized",  # record=, status=, stop_reason= ("stall" | "user" | None: states.STOP_REASONS)
    "stalled",  # quiet_s=, threshold_s=, in_tool=
    "interrupted",  # reason=
    "recovered",  # row=, event=, ledger= (the provider of the ledger it was recovered from)
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


class Tracing(Protocol):
    """What tracing (``offload.telemetry.tracing``) installs with ``set_tracing``."""

    def span(self, name: str, attributes: dict[str, Any]) -> ContextManager[SpanHandle]: ...

    def event(self, name: str, attributes: dict[str, Any]) -> None: ...

    def continuing(self, carrier: Any) -> ContextManager[None]: ...

    def carrier(self) -> dict[str, str]: ...


_OFF: ContextManager[SpanHandle] = contextlib.nullcontext(_NoSpan())
_tracing: Tracing | None = None


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


def set_tracing(tracing: Tracing | None) -> None:
    """Tracing installs itself here; None turns spans, span events and carriers back into no-ops."""
    global _tracing
    _tracing = tracing


def trace_carrier() -> dict[str, str]:
    """The current trace context as a W3C carrier (``traceparent``) to store with queued work;
    empty when tracing is off."""
    tracing = _tracing
    return tracing.carrier() if tracing is not None else {}


def continuing(carrier: Any) -> ContextManager[None]:
    """Run the body under the trace context ``carrier`` names (``trace_carrier`` of another
    process): what a worker does around dispatching a queued unit. A no-op when tracing is off."""
    tracing = _tracing
    return contextlib.nullcontext() if tracing is None or not carrier else tracing.continuing(carrier)


def span_event(name: str, **attributes: Any) -> None:
    """An event on the current span (``retry`` in a model call), or nothing when tracing is off."""
    tracing = _tracing
    if tracing is not None:
        tracing.event(name, attributes)


def span(name: str, **attributes: Any) -> ContextManager[SpanHandle]:
    """``with span("offload.model_call", model=m) as s: ...; s.set(prompt_tokens=n)``: a child
    span of whatever is current (a unit, a subagent) when tracing is on, a shared no-op when off.
    Used where work happens below the engine's view: parent turns (``delivers=[ids]`` links a
    turn to the delegations whose results it reads), subagents, model calls, tool calls."""
    tracing = _tracing
    return _OFF if tracing is None else tracing.span(name, attributes)
