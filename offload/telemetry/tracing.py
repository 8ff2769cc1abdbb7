"""OpenTelemetry traces of delegations, off by default.

The trace of one background delegation (``docs/telemetry.md``): the unit span
``offload.delegation`` from dispatch to the unit's result, under a short
``offload.delegation.dispatch`` span (ended and flushed at dispatch) under whatever span was
current then (the parent's ``delegate_task`` tool call); under the unit span one ``offload.subagent`` span per
child with its model calls (``chat MODEL``, GenAI conventions) and tool calls; and one
``offload.delegation.delivery`` span per delivery attempt, in whichever process delivers.

What a later process needs to continue the trace is stored in the ledger row (task
``trace_context``): the unit span's W3C ``traceparent``, its parent's (the dispatch span), its start time and
attributes. So a process that recovers a dead owner's unit emits the unit span itself (status
ERROR, ``unknown``) under the id the owner's exported spans name, with
``offload.delegation.recovered`` under it; a queued unit carries the dispatcher's context, so
the worker's unit span joins the parent's trace.

Invariants: a span is open only while its work is: the map of open unit spans holds running
units, the map of delivery spans holds claims in flight, and both are ended at process exit
(``offload.ended_by=process_exit``); the contexts of finished units kept for their deliveries
are bounded (``RECENT_UNITS``; older ones are read from the ledger), and so are delivery spans
whose claim another consumer took (``OPEN_DELIVERIES``).
"""
from __future__ import annotations

import atexit
import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, Status, StatusCode, Tracer

from offload.engine import observers
from offload.engine.states import NOT_COMPLETED
import offload.telemetry.flush as flush
import offload.telemetry.genai_metrics as genai_metrics
import offload.telemetry.recovered as recovered
import offload.telemetry.spans as sp
import offload.telemetry.unit_metrics as unit_metrics
from offload.telemetry.env import tracing_wanted

RECENT_UNITS = 256  # finished units whose context this process keeps for their delivery spans
OPEN_DELIVERIES = 1024  # delivery attempts in flight here at most; older ones lost their claim
_SETTLED = frozenset({"delivered", "acknowledged", "dropped"})


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OTEL_* variables ask for traces."""
    return tracing_wanted(environ)


class _Tracing:
    """The observer: turns the engine's notifications into unit, delivery and recovery spans."""

    def __init__(self, tracer: Tracer, capture_content: bool = False) -> None:
        self.tracer, self.capture_content = tracer, capture_content
        self.open: dict[str, Span] = {}  # running units
        self.deliveries: dict[str, Span] = {}  # delivery attempts in flight
        self.working: dict[int, Span] = {}  # spans of ``span()`` still open (a subagent, its model calls)
        self.finished: OrderedDict[str, SpanContext] = OrderedDict()
        self.lock = threading.Lock()

    def __call__(self, kind: str, delegation_id: str, fields: dict[str, Any]) -> None:
        handler = getattr(self, f"on_{kind}", None)
        if handler is not None:
            handler(delegation_id, **fields)

    def on_dispatching(self, delegation_id: str, record: dict[str, Any]) -> None:
        attributes = _unit_attributes(delegation_id, record)
        # The dispatch span ends (and is flushed: flush.FlushSoon) now, so a unit span another
        # process emits for a dead owner has a parent its owner exported, however soon it died.
        dispatch = self.tracer.start_span(flush.DISPATCH, attributes={"offload.delegation_id": delegation_id})
        span = self.tracer.start_span("offload.delegation", trace.set_span_in_context(dispatch), attributes=attributes)
        dispatch.end()
        start_ns = getattr(span, "start_time", None) or time.time_ns()  # a sampled-out span has none
        record["trace_context"] = {**sp.carrier_of(span), "start_ns": start_ns, "attributes": attributes,
                                   "parent": sp.carrier_of(dispatch)}
        with self.lock:
            self.open[delegation_id] = span

    def on_started(self, delegation_id: str, record: dict[str, Any]) -> None:
        span = self.open.get(delegation_id)
        if span is not None:  # the worker runs in its own context copy: no detach needed
            otel_context.attach(trace.set_span_in_context(span))

    def on_child_recorded(self, delegation_id: str, entry: dict[str, Any]) -> None:
        self._event(delegation_id, "child finished", {"offload.task_index": entry.get("task_index", -1),
                                                      "offload.status": str(entry.get("status"))})

    def on_stalled(self, delegation_id: str, quiet_s: float = 0.0, threshold_s: float = 0.0, in_tool: bool = False,
                   **_: Any) -> None:
        self._event(delegation_id, "stall", {"offload.quiet_s": float(quiet_s), "offload.threshold_s": float(threshold_s),
                                             "offload.phase": "in_tool" if in_tool else "idle"})

    def on_interrupted(self, delegation_id: str, reason: str) -> None:
        self._event(delegation_id, "interrupt", {"offload.reason": reason})

    def on_finalized(self, delegation_id: str, record: dict[str, Any], status: str, stop_reason: str | None = None,
                     **_: Any) -> None:
        with self.lock:
            span = self.open.pop(delegation_id, None)
        if span is None:
            return
        span.add_event("result", sp.clean({"status": status, "stop_reason": stop_reason}))
        span.set_attributes(sp.clean({"status": status, "stop_reason": stop_reason}))
        if status in NOT_COMPLETED:  # a partial unit too: some of its children did not complete
            span.set_status(Status(StatusCode.ERROR, status))
        span.end()
        self._remember(delegation_id, span.get_span_context())

    def on_recovered(self, delegation_id: str, row: Any, event: dict[str, Any], ledger: Any = None) -> None:
        stored = (row.task or {}).get("trace_context") or {}
        unit = self._unit_span_of(delegation_id, stored, row)
        start_ns = getattr(unit, "start_time", None) or 0
        died_ns = max(start_ns, int(recovered.last_seen_s(row, ledger) * 1e9))  # not when recovery ran
        for attributes, at_ns in recovered.finished_children(row, start_ns, died_ns):
            unit.add_event("child finished", attributes, timestamp=at_ns)
        unit.add_event("result", {"offload.status": "unknown"}, timestamp=died_ns)
        unit.set_status(Status(StatusCode.ERROR, "unknown: its owner process died before the unit finished"))
        recovery = self.tracer.start_span("offload.delegation.recovered", context=trace.set_span_in_context(unit),
                                          attributes={"offload.delegation_id": delegation_id})
        recovery.add_event("recovery", {"offload.owner_pid": row.owner_pid or 0, "offload.status": "unknown"})
        recovery.set_status(Status(StatusCode.ERROR, "recovered after its owner died"))
        recovery.end()
        unit.end(end_time=died_ns)
        self._remember(delegation_id, unit.get_span_context())

    def _unit_span_of(self, delegation_id: str, stored: dict[str, Any], row: Any) -> Span:
        """The dead owner's unit span, emitted here: its own ids when this tracer can choose ids
        (else a new span), its parent, start time and attributes as the owner stored them."""
        ids = sp.ids_of(stored)
        attributes = {**(stored.get("attributes") or {"offload.delegation_id": delegation_id}),
                      "offload.status": "unknown", "offload.recovered": True}
        start_ns = stored.get("start_ns") or int((row.dispatched_at or time.time()) * 1e9)
        parent = sp.context_of(stored.get("parent"))
        if ids is None or not sp.can_force_ids(self.tracer):
            return self.tracer.start_span("offload.delegation", parent, attributes=attributes, start_time=int(start_ns))
        with sp.forced_ids(self.tracer, *ids):
            return self.tracer.start_span("offload.delegation", parent, attributes=attributes, start_time=int(start_ns))

    def on_delivery(self, delegation_id: str, outcome: str, ledger: Any = None) -> None:
        if outcome == "claimed":
            span = self._under_unit(delegation_id, "offload.delegation.delivery", ledger)
            with self.lock:
                stale = [self.deliveries.pop(delegation_id, None)]
                self.deliveries[delegation_id] = span
                while len(self.deliveries) > OPEN_DELIVERIES:  # claims lost to another consumer never settle here
                    stale.append(self.deliveries.pop(next(iter(self.deliveries))))
            for old in filter(None, stale):
                old.set_attribute("offload.ended_by", "claim_lost")
                old.end()
            return
        with self.lock:
            span = self.deliveries.pop(delegation_id, None)
        span = span or self._under_unit(delegation_id, "offload.delegation.delivery", ledger)
        span.add_event(outcome, {"offload.outcome": outcome})
        span.set_attribute("offload.delivery", outcome)
        if outcome == "dropped":
            span.set_status(Status(StatusCode.ERROR, "dropped: the result was not delivered"))
        span.end()

    def _under_unit(self, delegation_id: str, name: str, ledger: Any) -> Span:
        """A span of this process under the unit span (started here or in another process)."""
        with self.lock:
            known = self.finished.get(delegation_id)
        if known is not None:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(known))
        else:
            parent = sp.context_of(_stored_context(delegation_id, ledger))
        return self.tracer.start_span(name, context=parent, attributes={"offload.delegation_id": delegation_id})

    def _remember(self, delegation_id: str, context: SpanContext) -> None:
        with self.lock:
            self.finished[delegation_id] = context
            while len(self.finished) > RECENT_UNITS:
                self.finished.popitem(last=False)

    def _event(self, delegation_id: str, name: str, attributes: dict[str, Any]) -> None:
        span = self.open.get(delegation_id)
        if span is not None:
            span.add_event(name, attributes)

    def end_all(self, reason: str, units: bool = True) -> None:
        """End what is still open (the process exits mid-unit or mid-delivery), so it is exported;
        ``units=False``: the delivery spans and the working spans (a subagent, its calls) only (the
        unit spans of a process that dies are emitted by the process that recovers its units)."""
        with self.lock:
            # A running child's span and its open calls end too: its finished model calls were
            # exported already, and without their subagent span they would hang from nothing.
            spans = [*(self.open.values() if units else ()), *self.deliveries.values(), *self.working.values()]
            self.deliveries, self.working = {}, {}
            if units:
                self.open = {}
        for span in spans:
            span.set_attribute("offload.ended_by", reason)
            span.end()

    # -- the observers.Tracing seam: spans of work below the engine's view --------------------
    @contextmanager
    def span(self, name: str, attributes: dict[str, Any]) -> Iterator[sp.Handle]:
        delivers = [str(d) for d in attributes.pop("delivers", None) or ()]
        if not self.capture_content:  # task text is content: exported only when asked for
            attributes = {k: v for k, v in attributes.items() if k not in sp.CONTENT_KEYS}
        links = [trace.Link(context) for d in delivers if (context := self._unit_context(d)) is not None]
        name, kind, attributes = sp.start_kind(name, {**attributes, "delivers": delivers or None})
        with self.tracer.start_as_current_span(name, kind=kind, attributes=attributes, links=links,
                                               record_exception=False, set_status_on_exception=False) as span:
            handle = sp.Handle(span, genai=kind is trace.SpanKind.CLIENT)
            with self.lock:
                self.working[id(span)] = span
            try:
                yield handle
            except Exception as exc:  # the SDK's own record would carry the message's URLs
                handle.raised(exc)
                raise
            finally:
                with self.lock:
                    self.working.pop(id(span), None)

    def _unit_context(self, delegation_id: str) -> SpanContext | None:
        """The unit span of a delegation whose result this process is delivering (its delivery
        span's parent) or ran recently; None if unknown here."""
        with self.lock:
            delivering = self.deliveries.get(delegation_id)
            known = self.finished.get(delegation_id)
        parent = getattr(delivering, "parent", None) if delivering is not None else None
        return parent if parent is not None and parent.is_valid else known

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        redacted = {k: sp.redact_urls(v) if isinstance(v, str) else v for k, v in attributes.items()}
        trace.get_current_span().add_event(name, sp.clean(redacted))

    def carrier(self) -> dict[str, str]:
        return sp.carrier_of()

    @contextmanager
    def continuing(self, carrier: Any) -> Iterator[None]:
        """Run the body under the context ``carrier`` names (a queued unit's dispatcher)."""
        context = sp.context_of(carrier)
        token = otel_context.attach(context) if context is not None else None
        try:
            yield
        finally:
            if token is not None:
                otel_context.detach(token)


def _stored_context(delegation_id: str, ledger: Any) -> Any:
    """``ledger``: the provider of the ledger the delivering runtime uses (None: unknown)."""
    try:
        row = ledger().get(delegation_id) if ledger is not None else None
    except Exception:
        row = None
    return ((row.task if row else None) or {}).get("trace_context")


def _unit_attributes(delegation_id: str, record: dict[str, Any]) -> dict[str, Any]:
    attributes = {"delegation_id": delegation_id, "session_key": record.get("session_key") or "",
                  "children": len(record.get("task_indexes") or record.get("goals") or []) or 1,
                  "group": record.get("group"), "model": record.get("model")}
    return sp.clean(attributes)


_active: _Tracing | None = None
_remove: Any = None
_exit_hook_registered = False


def install(tracer: Tracer, environ: Mapping[str, str] = os.environ) -> None:
    """Trace with ``tracer`` (tests pass one of a provider made by ``spans.tracer_provider``);
    task text (``offload.goal``) only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``."""
    global _active, _remove, _exit_hook_registered
    uninstall()
    _active = _Tracing(tracer, capture_content=sp.content_wanted(environ))
    _remove = observers.add_observer(_active)
    observers.set_tracing(_active)
    if not _exit_hook_registered:
        atexit.register(_end_at_exit)
        _exit_hook_registered = True


def uninstall() -> None:
    global _active, _remove
    if _remove is not None:
        _remove()
    observers.set_tracing(None)
    genai_metrics.uninstall()
    unit_metrics.uninstall()
    _active, _remove = None, None


def _end_at_exit() -> None:
    if _active is not None:
        _active.end_all("process_exit")


def end_deliveries(reason: str) -> None:
    """End the delivery spans in flight (a termination signal: the process is about to die)."""
    if _active is not None:
        _active.end_all(reason, units=False)
