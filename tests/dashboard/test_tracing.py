"""OpenTelemetry traces with the SDK's in-memory exporter: the span tree of a real 3-child
fan-out, span events, the trace context in the ledger, and when tracing is on at all."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from offload.agent.core import AIAgent
from offload.engine import observers
from offload.testing.model_server import ScriptedModelServer, rule_script, text_reply, tool_call_reply
from offload.telemetry import export, tracing
from offload.telemetry.spans import tracer_provider
from tests.engine.conftest import wait_event

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider.get_tracer("test"))
    yield exporter
    tracing.uninstall()
    provider.shutdown()


def _by_name(finished, name):
    return [s for s in finished if s.name == name]


def test_span_tree_of_a_three_child_fan_out(runtime, spans, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    script = rule_script([
        (lambda text: text.startswith("Read the notes file, pass "), tool_call_reply("read_file", {"path": "notes.txt"})),
        (lambda text: "hello" in text, text_reply("read it")),
    ])
    with ScriptedModelServer(script) as server:
        parent = AIAgent(model="demo-model", base_url=server.url, api_key="k", toolsets=["delegation", "file"],
                         workspace=tmp_path, session_id="parent-1", provided_toolsets=runtime.toolsets())
        handle = json.loads(runtime.delegate_tool(tasks=[{"goal": f"Read the notes file, pass {i}"} for i in range(3)],
                                                  background=True, parent_agent=parent))
        event = wait_event(handle["delegation_id"], timeout_s=30, bus=runtime.bus)
    assert event["status"] == "completed"
    runtime.deliveries.mark_delivered(handle["delegation_id"])  # acknowledgement ends the unit span

    finished = spans.get_finished_spans()
    (unit,) = _by_name(finished, "offload.delegation")
    assert unit.attributes["offload.delegation_id"] == handle["delegation_id"]
    assert unit.attributes["offload.children"] == 3 and unit.attributes["offload.status"] == "completed"
    subagents = _by_name(finished, "offload.subagent")
    assert sorted(s.attributes["offload.task_index"] for s in subagents) == [0, 1, 2]
    assert all(s.parent.span_id == unit.context.span_id for s in subagents)
    model_calls = _by_name(finished, "chat demo-model")  # GenAI conventions: "{operation} {model}"
    tool_calls = _by_name(finished, "offload.tool_call")
    assert len(model_calls) == 6 and len(tool_calls) == 3  # per child: tool call, then the answer
    by_id = {s.context.span_id: s for s in subagents}
    assert all(s.parent.span_id in by_id for s in model_calls + tool_calls)
    assert all(s.attributes["gen_ai.usage.input_tokens"] > 0 and s.attributes["gen_ai.usage.output_tokens"] > 0
               for s in model_calls)
    assert {s.attributes["offload.tool"] for s in tool_calls} == {"read_file"}
    assert {s.context.trace_id for s in finished} == {unit.context.trace_id}
    events = [e.name for e in unit.events]
    assert events.count("child finished") == 3 and events[-1] == "result"
    assert unit.end_time >= max(s.end_time for s in subagents)  # the unit span ends with its result
    (delivery,) = _by_name(finished, "offload.delegation.delivery")
    assert delivery.parent.span_id == unit.context.span_id and [e.name for e in delivery.events] == ["acknowledged"]
    stored = runtime.ledger().get(handle["delegation_id"]).task["trace_context"]
    assert stored["traceparent"].split("-")[1] == f"{unit.context.trace_id:032x}"


def test_interrupt_stall_and_delivery_are_span_events(runtime, spans, held):
    unit = held(["slow"])
    runtime.engine.interrupt_one(unit.delegation_id)
    observers.notify("stalled", unit.delegation_id)  # what the stall monitor says before interrupting
    event = wait_event(unit.delegation_id, bus=runtime.bus)
    assert event["status"] == "interrupted"  # a stopped unit, never "error" or "completed"
    claim = runtime.deliveries.claim_event(event, "test")
    runtime.deliveries.release_event(event, claim)
    claim = runtime.deliveries.claim_event(event, "test")
    runtime.deliveries.complete_event(event, claim)
    (span,) = _by_name(spans.get_finished_spans(), "offload.delegation")
    names = [e.name for e in span.events]
    assert names == ["interrupt", "stall", "result"]
    assert span.status.is_ok is False
    attempts = _by_name(spans.get_finished_spans(), "offload.delegation.delivery")  # one span per attempt
    assert [[e.name for e in a.events] for a in attempts] == [["released"], ["delivered"]]
    assert all(a.parent.span_id == span.context.span_id for a in attempts)


def test_tracing_is_off_unless_the_otel_variables_ask():
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})


def test_with_tracing_off_a_span_is_a_shared_no_op():
    with observers.span("offload.model_call", model="m") as span:
        span.set(prompt_tokens=1)
    assert observers.span("a") is observers.span("b")



def _killed_owner(tmp_path: Path) -> tuple[str, dict]:
    """Run trace_owner.py until its first child is recorded, SIGKILL it; returns the unit id
    and the spans it exported: its dispatch span, then its first child's (whose parent is the unit span)."""
    spans_file = tmp_path / "owner-spans.jsonl"
    owner = subprocess.Popen([sys.executable, str(Path(__file__).with_name("trace_owner.py")), str(spans_file)],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        ready = owner.stdout.readline().split()
        assert ready[:1] == ["READY"], f"the owner did not start: {ready}"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    dispatch, child = [json.loads(line) for line in spans_file.read_text().splitlines()]
    assert dispatch["name"] == "offload.delegation.dispatch"  # ended at dispatch: the unit span's parent
    assert child["name"] == "offload.subagent"  # the unit span itself died with its process
    return ready[1], {**child, "dispatch_id": dispatch["span_id"]}


def test_one_trace_across_a_sigkill_and_recovery_in_a_fresh_process(runtime, spans, tmp_path):
    delegation_id, child = _killed_owner(tmp_path)
    replay: queue.Queue = queue.Queue()
    assert runtime.deliveries.restore(replay) == 1
    event = replay.get_nowait()
    assert event["delegation_id"] == delegation_id and event["status"] == "unknown"
    claim = runtime.deliveries.claim_event(event, "test")
    assert runtime.deliveries.complete_event(event, claim)

    finished = spans.get_finished_spans()
    (unit,) = _by_name(finished, "offload.delegation")  # emitted here, for the dead owner
    assert f"{unit.context.trace_id:032x}" == child["trace_id"]  # the same trace
    assert f"{unit.context.span_id:016x}" == child["parent_id"]  # the id the owner's child span names
    assert f"{unit.parent.span_id:016x}" == child["dispatch_id"]  # under the dispatch span the owner exported
    assert unit.status.is_ok is False and unit.attributes["offload.status"] == "unknown"
    assert unit.attributes["offload.children"] == 2 and unit.attributes["offload.session_key"] == "sess-kill"
    assert unit.start_time < unit.end_time
    (recovered,) = _by_name(finished, "offload.delegation.recovered")
    (delivery,) = _by_name(finished, "offload.delegation.delivery")
    assert recovered.parent.span_id == delivery.parent.span_id == unit.context.span_id
    assert [e.name for e in recovered.events] == ["recovery"] and recovered.status.is_ok is False
    assert [e.name for e in delivery.events] == ["delivered"]


def test_the_cli_traces_when_the_otel_variables_ask(tmp_path):
    delegation_id, child = _killed_owner(tmp_path)
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "offload-test"}
    done = subprocess.run([sys.executable, "-m", "offload", "inbox", "--ack", delegation_id], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "recovered 1 delegation" in done.stdout and f"acknowledged {delegation_id}" in done.stdout
    assert '"name": "offload.delegation.recovered"' in done.stdout
    assert f'"trace_id": "0x{child["trace_id"]}"' in done.stdout
    assert '"service.name": "offload-test"' in done.stdout


def test_an_unsupported_exporter_leaves_tracing_off_with_a_warning(caplog):
    assert export.install_from_env({"OTEL_TRACES_EXPORTER": "zipkin"}) is None
    assert "OTEL_TRACES_EXPORTER=zipkin is not supported; use otlp, console or none" in caplog.text
    with observers.span("x") as span:  # still the no-op
        span.set(a=1)


def test_otel_variables_without_the_extra_warn_and_run_untraced():
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "from offload.telemetry import install_tracing_from_env\n"
            "print(install_tracing_from_env())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert done.stdout.strip() == "False"
    assert "pip install -e '.[dashboard]'); running without traces" in done.stderr
