"""Failures are errors in a trace (issue 32, item 6), seen by a loopback OTLP receiver: a failed
tool call, a subagent that did not complete and the unit around it have span status ERROR;
a model call the LLM client retried carries a ``retry`` event per failed attempt."""
from __future__ import annotations

import json
import threading

import pytest

from offload.agent.core import AIAgent
from offload.testing.model_server import ScriptedModelServer, error_reply, rule_script, text_reply, tool_call_reply
from tests.engine.conftest import wait_event
from tests.telemetry.receiver import Tree

pytestmark = pytest.mark.timeout(90)
GOALS = ["Tool task: call a tool that does not exist", "Flaky task: the server fails once",
         "Broken task: the server refuses it"]


def _script():
    flaky_calls = [0]
    lock = threading.Lock()

    def flaky(request):
        with lock:
            flaky_calls[0] += 1
            first = flaky_calls[0] == 1
        return error_reply(503, "overloaded", retry_after_s=0) if first else text_reply("flaky done")

    return rule_script([
        (lambda text: text.startswith("Tool task"), tool_call_reply("no_such_tool", {})),
        (lambda text: "no_such_tool" in text, text_reply("the tool was not there")),
        (lambda text: text.startswith("Flaky task"), flaky),
        (lambda text: text.startswith("Broken task"), error_reply(400, "this request is malformed")),
    ])


def test_failed_tool_call_child_and_unit_are_errors_and_a_retry_is_an_event(runtime, traced, receiver, tmp_path):
    with ScriptedModelServer(_script()) as server:
        parent = AIAgent(model="demo-model", base_url=server.url, api_key="k", toolsets=["delegation"],
                         workspace=tmp_path, session_id="parent-1", provided_toolsets=runtime.toolsets())
        handle = json.loads(runtime.delegate_tool(tasks=[{"goal": g} for g in GOALS], background=True,
                                                  parent_agent=parent))
        event = wait_event(handle["delegation_id"], timeout_s=60, bus=runtime.bus)
    assert event["status"] == "partial", event
    runtime.deliveries.mark_delivered(handle["delegation_id"])  # acknowledgement ends the unit span
    traced.force_flush()
    spans = receiver.wait_for(lambda got: any(s.name == "offload.delegation" for s in got))

    unit = next(s for s in spans if s.name == "offload.delegation")
    tree = Tree(spans, unit.trace_id)
    assert unit.status == "error" and unit.attributes["offload.status"] == "partial"
    subagents = {s.attributes["offload.task_index"]: s for s in tree.children(unit, "offload.subagent")}
    assert [subagents[i].status for i in range(3)] == ["unset", "unset", "error"]
    assert subagents[2].status_message.startswith(event["results"][2]["status"])
    (tool_call,) = tree.children(subagents[0], "offload.tool_call")  # not among the leaf's tools
    assert tool_call.status == "error" and "no_such_tool" in tool_call.status_message
    flaky_calls = tree.children(subagents[1], "chat demo-model")
    retried = [s for s in flaky_calls if "retry" in s.event_names]
    assert len(flaky_calls) == 1 and len(retried) == 1
    retry = dict(retried[0].events)["retry"]
    assert retry["offload.attempt"] == 1 and "503" in retry["offload.reason"]
    (broken_call,) = tree.children(subagents[2], "chat demo-model")
    assert broken_call.status == "error"  # the call raised: the span says so
    assert not tree.orphans
