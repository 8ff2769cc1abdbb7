"""A long-running process keeps no span open past its work (issue 32, item 2): a worker runs
1,000 units whose results another process delivers; each unit span ends with its unit (before,
each stayed open until the worker exited), and the contexts kept for later deliveries stay
bounded, so the worker's memory does not grow with the units it ran."""
from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from offload.engine import observers
from offload.engine.units import batch_spec
from offload.origin import Origin
from offload.telemetry import tracing
from offload.telemetry.spans import tracer_provider
from tests.engine.conftest import wait_event

pytestmark = pytest.mark.timeout(120)
UNITS = 1_000


class _Counting(InMemorySpanExporter):
    """Counts ended spans without keeping them (1,000 units' spans would be the growth we look for)."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = 0

    def export(self, spans):
        self.ended += len(spans)
        return super().export([])


def test_a_thousand_units_leave_no_span_open(runtime):
    exporter = _Counting()
    provider = tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider.get_tracer("test"))
    finalized = threading.Event()  # told after tracing, which ends the unit span on the same notification
    remove = observers.add_observer(lambda kind, _id, _fields: finalized.set() if kind == "finalized" else None)
    try:
        observer = tracing._active
        for i in range(UNITS):  # as a worker: run each unit, deliver none (the parent's host does)
            finalized.clear()
            handle = runtime.engine.dispatch(batch_spec([f"unit {i}"], model="m", origin=Origin.capture("sess-long")),
                                             lambda: {"results": [{"task_index": 0, "status": "completed"}]}, 4)
            wait_event(handle["delegation_id"], bus=runtime.bus)
            assert finalized.wait(10)  # the event is published just before the observers are told
            assert len(observer.open) + len(observer.deliveries) == 0, f"unit {i} left a span open"
        assert len(observer.finished) == tracing.RECENT_UNITS
        assert exporter.ended == 2 * UNITS  # each unit's dispatch span, and its unit span ended with it
    finally:
        remove()
        tracing.uninstall()
        provider.shutdown()


def test_delivery_spans_whose_claim_was_lost_are_ended_not_kept():
    exporter = _Counting()
    provider = tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider.get_tracer("test"))
    try:
        for i in range(tracing.OPEN_DELIVERIES + 100):  # claimed here, settled by another consumer
            observers.notify("delivery", f"deleg_{i}", outcome="claimed")
        assert len(tracing._active.deliveries) == tracing.OPEN_DELIVERIES
        assert exporter.ended == 100
    finally:
        tracing.uninstall()
        provider.shutdown()
