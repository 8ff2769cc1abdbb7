"""A unit run by an ``offload worker`` is part of the parent's trace and its span ends when the
unit ends (issue 32, item 2), seen by a loopback OTLP receiver: the dispatcher stores its trace
context in the queued row, the worker's unit span is a child of the dispatcher's span, and it
is exported while the worker keeps running (not at its exit)."""
from __future__ import annotations

import queue

import pytest

from offload.engine import observers
from tests.postgres.test_workers import CountingModel, deliver_all, parent_host, queue_units, start_worker  # noqa: F401
from tests.telemetry.conftest import receiver, traced  # noqa: F401 - fixtures
from tests.telemetry.receiver import Tree
from tools import async_delegation_delivery as delivery

pytestmark = pytest.mark.timeout(120)


def test_a_workers_unit_spans_join_the_dispatchers_trace_and_end_with_the_unit(
        hosts, tmp_path, pg_schema, parent_host, model_server, traced, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # the worker exports within 0.2 s of a span's end
    monkeypatch.setenv("OTEL_SERVICE_NAME", "offload-worker")
    server = model_server(CountingModel(delay_s=0.05))
    q: queue.Queue = queue.Queue()
    delivery.restore_undelivered_completions(q)
    with observers.span("offload.tool_call", tool="delegate_task"):  # the parent's tool call
        ids = queue_units(parent_host, 3)
    worker = start_worker(hosts, tmp_path, pg_schema.url, "host-w", server, concurrency=2)
    delivered, statuses = deliver_all(q, set(ids))
    assert set(statuses.values()) == {"completed"}

    spans = receiver.wait_for(lambda got: sum(s.name == "offload.delegation" for s in got) == 3)
    assert worker.proc.poll() is None  # exported while the worker runs on
    traced.force_flush()
    spans = receiver.wait_for(lambda got: any(s.name == "offload.tool_call" for s in got))
    (call,) = [s for s in spans if s.name == "offload.tool_call"]
    tree = Tree(spans, call.trace_id)
    units = tree.units_under(call)
    assert sorted(u.attributes["offload.delegation_id"] for u in units) == ids
    assert {u.service for u in units} == {"offload-worker"}
    for unit in units:
        row = parent_host.get(unit.attributes["offload.delegation_id"])
        assert "offload.ended_by" not in unit.attributes
        assert abs(unit.end_ns / 1e9 - row.completed_at) < 1.0  # ended with the unit, not at exit
        (subagent,) = tree.children(unit, "offload.subagent")
        assert tree.children(subagent, "chat demo-model")
    assert not tree.orphans
