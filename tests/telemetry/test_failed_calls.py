"""Failed model calls are in the GenAI metrics and carry ``error.type`` (issue 42, items 3 and 6),
seen by a loopback OTLP receiver: a child whose server always answers 500 gives failed model
spans (status ERROR, ``error.type=500``) and as many ``gen_ai.client.operation.duration`` points
with ``error.type``; a successful call names the model and completion id the server answered
with; no span, status or event carries the model endpoint's URL, only its host; a subagent's
task text is exported only when content capture is asked for."""
from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from offload import __version__
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from offload.agent.core import AIAgent
from offload.engine import observers
from offload.telemetry import tracing
from offload.telemetry.spans import CAPTURE_CONTENT, tracer_provider
from offload.testing.model_server import ScriptedModelServer, error_reply, rule_script, text_reply
from tests.engine.conftest import wait_event

pytestmark = pytest.mark.timeout(90)


def test_failed_model_calls_are_counted_with_error_type_and_no_url_leaves_the_process(runtime, traced, receiver,
                                                                                      tmp_path):
    script = rule_script([(lambda text: text.startswith("Broken"), error_reply(500, "boom", retry_after_s=0)),
                          (lambda text: text.startswith("Fine"), text_reply("fine"))])
    with ScriptedModelServer(script) as server:
        parent = AIAgent(model="demo-model", base_url=server.url, api_key="k",
                         toolsets=["delegation"], workspace=tmp_path, session_id="parent-1",
                         provided_toolsets=runtime.toolsets())
        handle = json.loads(runtime.delegate_tool(tasks=[{"goal": "Broken task"}, {"goal": "Fine task"}],
                                                  background=True, parent_agent=parent))
        event = wait_event(handle["delegation_id"], timeout_s=60, bus=runtime.bus)
    assert event["status"] == "partial", event
    runtime.deliveries.mark_delivered(handle["delegation_id"])
    traced.force_flush()  # spans and metrics, once (the metrics are cumulative: one export holds them all)
    spans = receiver.wait_for(lambda got: any(s.name == "offload.delegation" for s in got))

    chats = [s for s in spans if s.name == "chat demo-model"]
    failed = [s for s in chats if s.status == "error"]
    fine = [s for s in chats if s.status != "error"]
    assert len(failed) == 1 and len(fine) == 1  # the failed call retried inside one span
    assert failed[0].attributes["error.type"] == "500" and "retry" in failed[0].event_names
    assert fine[0].attributes["gen_ai.response.model"] == "demo-model"
    assert fine[0].attributes["gen_ai.response.id"].startswith("chatcmpl")
    host = urlsplit(server.url).netloc
    texts = [s.status_message for s in spans] + [str(attrs) for s in spans for _, attrs in s.events]
    assert any(host in text for text in texts)  # the host is named ...
    assert not any("http://" in text for text in texts), texts  # ... never the URL
    assert {s.resource.get("service.version") for s in spans} == {__version__}
    subagents = [s for s in spans if s.name == "offload.subagent"]
    assert len(subagents) == 2 and not any("offload.goal" in s.attributes for s in subagents)  # content: opt-in

    points = receiver.wait_for_points(lambda got: any(p.attributes.get("error.type") for p in got))
    durations = [p for p in points if p.metric == "gen_ai.client.operation.duration"]
    assert sum(p.count for p in durations) == len(chats)
    assert sum(p.count for p in durations if p.attributes.get("error.type") == "500") == len(failed)
    assert {p.attributes.get("gen_ai.response.model") for p in durations if "error.type" not in p.attributes} \
        == {"demo-model"}


def test_task_text_is_exported_only_when_content_capture_is_asked_for():
    exporter = InMemorySpanExporter()
    provider = tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        for environ, kept in (({}, False), ({CAPTURE_CONTENT: "true"}, True)):
            tracing.install(provider.get_tracer("test"), environ)
            with observers.span("offload.subagent", task_index=0, goal="summarise the secret plan"):
                pass
            (span,) = exporter.get_finished_spans()
            exporter.clear()
            assert ("offload.goal" in span.attributes) is kept and span.attributes["offload.task_index"] == 0
    finally:
        tracing.uninstall()
        provider.shutdown()
