"""Parent turns are traced and model calls read as GenAI (issue 32, items 3 and 7), seen by a
loopback OTLP receiver from a real `offload run`: the turn that delegates holds the
``delegate_task`` tool call and the units under it, each turn that reads a delivered result
links to that delegation's unit span, model calls are GenAI client spans, and the token metrics
(``gen_ai.client.token.usage``) add up to the spans' token counts."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.conftest import cli_env, offload
from tests.telemetry.receiver import Tree

pytestmark = pytest.mark.timeout(120)


def test_a_run_traces_its_turns_links_delivery_turns_and_reports_genai_tokens(receiver):
    done = subprocess.run([sys.executable, "-m", "offload", "run", "--demo-model", "compare the formats"],
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
                          env=cli_env(**receiver.env(OTEL_SERVICE_NAME="offload-run")))
    assert done.returncode == 0, done.stderr
    units = {row["id"] for row in json.loads(offload("inbox", "--all", "--json").stdout)["settled"]}
    spans = receiver.wait_for(lambda got: sum(s.name == "offload.turn" for s in got) >= 1 + len(units))

    turns = [s for s in spans if s.name == "offload.turn"]
    (first,) = [t for t in turns if "offload.delivers" not in t.attributes]
    assert first.parent_id is None  # a turn is the root of its trace
    tree = Tree(spans, first.trace_id)
    (call,) = [s for s in tree.children(first, "offload.tool_call") if s.attributes["offload.tool"] == "delegate_task"]
    unit_spans = {s.attributes["offload.delegation_id"]: s for s in tree.units_under(call)}
    assert set(unit_spans) == units
    delivery_turns = [t for t in turns if "offload.delivers" in t.attributes]
    assert sorted(d for t in delivery_turns for d in t.attributes["offload.delivers"]) == sorted(units)
    for turn in delivery_turns:
        (delivered,) = turn.attributes["offload.delivers"]
        unit = unit_spans[delivered]
        assert (unit.trace_id, unit.span_id) in turn.links  # the turn that reads a result links to it

    chats = [s for s in spans if s.name.startswith("chat ")]
    assert chats and all(s.kind == "client" and s.attributes["gen_ai.operation.name"] == "chat" for s in chats)
    assert all(s.attributes["gen_ai.request.model"] and s.attributes["gen_ai.usage.input_tokens"] > 0
               and s.attributes["gen_ai.usage.output_tokens"] > 0 for s in chats)
    # the demo model is a loopback server speaking the OpenAI API, not OpenAI: named by what it
    # speaks, with the server it was
    assert {(s.attributes["gen_ai.provider.name"], s.attributes["server.address"]) for s in chats} \
        == {("openai_compatible", "127.0.0.1")}
    assert all(isinstance(s.attributes["server.port"], int) for s in chats)
    parent_chats = tree.children(first, None)
    session = next(s for s in parent_chats if s.name.startswith("chat ")).attributes["gen_ai.conversation.id"]
    assert session.startswith("sess_") and first.attributes["offload.session_id"] == session

    points = receiver.wait_for_points(lambda got: any(p.metric == "gen_ai.client.token.usage" for p in got))
    tokens = [p for p in points if p.metric == "gen_ai.client.token.usage"]
    by_type = {kind: sum(p.total for p in tokens if p.attributes["gen_ai.token.type"] == kind)
               for kind in ("input", "output")}
    assert by_type == {"input": sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats),
                       "output": sum(s.attributes["gen_ai.usage.output_tokens"] for s in chats)}
    assert sum(p.count for p in points if p.metric == "gen_ai.client.operation.duration") == len(chats)
    assert {p.attributes["gen_ai.provider.name"] for p in tokens} == {"openai_compatible"}
