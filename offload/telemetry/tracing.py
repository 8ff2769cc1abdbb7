"""OpenTelemetry traces of delegations, off by default.

One span per delegation unit (``offload.delegation``) from dispatch to acknowledgement, with
the subagent, model-call and tool-call spans under it (opened through
``offload.engine.observers.span``) and span events for stall, interrupt, each delivery attempt
and its outcome. The unit span's W3C trace context is stored in the ledger row (task
``trace_context``), so a process that recovers or delivers the unit after its owner died
continues the same trace: its ``offload.delegation.recovered`` (or ``.delivery``) span is a
child of the original unit span.

``install_from_env()`` turns it on only when the standard variables ask for it:
``OTEL_TRACES_EXPORTER`` (``otlp`` or ``console``; ``none`` = off) or an
``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT``; ``OTEL_SDK_DISABLED=true`` wins. The exporter then
reads its own ``OTEL_*`` settings (endpoint, headers, protocol, service name).
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from offload.engine import observers
from offload.engine.states import NOT_COMPLETED
from offload.telemetry import tracing_wanted

logger = logging.getLogger(__name__)

_PROPAGATOR = TraceContextTextMapPropagator()
_SETTLED = frozenset({"delivered", "acknowledged", "dropped"})


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OTEL_* variables ask for traces."""
    return tracing_wanted(environ)


def install_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on if the environment asks for it (``offload.telemetry.export``)."""
    from offload.telemetry import export

    return export.install_from_env(environ) is not None


class _Tracing:
    """The observer: keeps this process's open unit spans and turns notifications into spans."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.open: dict[str, Span] = {}
        self.lock = threading.Lock()

    def __call__(self, kind: str, delegation_id: str, fields: dict[str, Any]) -> None:
        handler = getattr(self, f"on_{kind}", None)
        if handler is not None:
            handler(delegation_id, **fields)

    def on_dispatching(self, delegation_id: str, record: dict[str, Any]) -> None:
        span = self.tracer.start_span("offload.delegation", attributes=_unit_attributes(delegation_id, record))
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        record["trace_context"] = carrier  # stored in the ledger row's task
        with self.lock:
            self.open[delegation_id] = span

    def on_started(self, delegation_id: str, record: dict[str, Any]) -> None:
        span = self.open.get(delegation_id)
        if span is not None:  # the worker runs in its own context copy: no detach needed
            otel_context.attach(trace.set_span_in_context(span))

    def on_child_recorded(self, delegation_id: str, entry: dict[str, Any]) -> None:
        self._event(delegation_id, "child finished", {"offload.task_index": entry.get("task_index", -1),
                                                      "offload.status": str(entry.get("status"))})

    def on_stalled(self, delegation_id: str) -> None:
        self._event(delegation_id, "stall", {})

    def on_interrupted(self, delegation_id: str, reason: str) -> None:
        self._event(delegation_id, "interrupt", {"offload.reason": reason})

    def on_finalized(self, delegation_id: str, record: dict[str, Any], status: str) -> None:
        span = self.open.get(delegation_id)
        if span is None:
            return
        span.add_event("result", {"offload.status": status})
        span.set_attribute("offload.status", status)
        if status in NOT_COMPLETED:  # a partial unit too: some of its children did not complete
            span.set_status(Status(StatusCode.ERROR, status))

    def on_recovered(self, delegation_id: str, row: Any, event: dict[str, Any]) -> None:
        span = self._continue(delegation_id, "offload.delegation.recovered", (row.task or {}).get("trace_context"))
        span.add_event("recovery", {"offload.owner_pid": row.owner_pid or 0, "offload.status": "unknown"})

    def on_delivery(self, delegation_id: str, outcome: str, ledger: Any = None) -> None:
        span = self.open.get(delegation_id) or self._continue_from_ledger(delegation_id, ledger)
        span.add_event("delivery attempt" if outcome == "claimed" else outcome, {"offload.outcome": outcome})
        if outcome in _SETTLED:
            span.set_attribute("offload.delivery", outcome)
            self._end(delegation_id)

    def _continue_from_ledger(self, delegation_id: str, ledger: Any) -> Span:
        """``ledger``: the provider of the ledger the delivering runtime uses (None: unknown)."""
        try:
            row = ledger().get(delegation_id) if ledger is not None else None
        except Exception:
            row = None
        carrier = ((row.task if row else None) or {}).get("trace_context")
        return self._continue(delegation_id, "offload.delegation.delivery", carrier)

    def _continue(self, delegation_id: str, name: str, carrier: Any) -> Span:
        """A span of this process under the unit span another process started (same trace)."""
        parent = _PROPAGATOR.extract(carrier) if isinstance(carrier, dict) else None
        span = self.tracer.start_span(name, context=parent, attributes={"offload.delegation_id": delegation_id})
        with self.lock:
            previous, self.open[delegation_id] = self.open.get(delegation_id), span
        if previous is not None:
            previous.end()
        return span

    def _event(self, delegation_id: str, name: str, attributes: dict[str, Any]) -> None:
        span = self.open.get(delegation_id)
        if span is not None:
            span.add_event(name, attributes)

    def _end(self, delegation_id: str) -> None:
        with self.lock:
            span = self.open.pop(delegation_id, None)
        if span is not None:
            span.end()

    def end_all(self, reason: str) -> None:
        """End what is still open (the process exits before acknowledgement), so it is exported."""
        with self.lock:
            spans, self.open = list(self.open.values()), {}
        for span in spans:
            span.set_attribute("offload.ended_by", reason)
            span.end()

    @contextmanager
    def span(self, name: str, attributes: dict[str, Any]) -> Iterator["_Handle"]:
        with self.tracer.start_as_current_span(name, attributes=_clean(attributes)) as span:
            yield _Handle(span)


class _Handle:
    """What ``observers.span`` yields: ``set(**attributes)`` on the live span."""

    def __init__(self, span: Span) -> None:
        self._span = span

    def set(self, **attributes: Any) -> None:
        self._span.set_attributes(_clean(attributes))

    def fail(self, description: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, description[:500]))


def _current_event(name: str, attributes: dict[str, Any]) -> None:
    trace.get_current_span().add_event(name, _clean(attributes))


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {f"offload.{k}": v if isinstance(v, (str, bool, int, float)) else str(v)
            for k, v in attributes.items() if v is not None}


def _unit_attributes(delegation_id: str, record: dict[str, Any]) -> dict[str, Any]:
    attributes = {"delegation_id": delegation_id, "session_key": record.get("session_key") or "",
                  "children": len(record.get("task_indexes") or record.get("goals") or []) or 1,
                  "group": record.get("group"), "model": record.get("model")}
    return _clean(attributes)


_active: _Tracing | None = None
_remove: Any = None
_exit_hook_registered = False


def install(tracer: Tracer) -> None:
    """Trace with ``tracer`` (tests pass one backed by the SDK's in-memory exporter)."""
    global _active, _remove, _exit_hook_registered
    uninstall()
    _active = _Tracing(tracer)
    _remove = observers.add_observer(_active)
    observers.set_span_factory(_active.span, _current_event)
    if not _exit_hook_registered:
        atexit.register(_end_at_exit)
        _exit_hook_registered = True


def uninstall() -> None:
    global _active, _remove
    if _remove is not None:
        _remove()
    observers.set_span_factory(None)
    _active, _remove = None, None


def _end_at_exit() -> None:
    if _active is not None:
        _active.end_all("process_exit")
