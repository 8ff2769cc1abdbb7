"""A child receives the parent's ``context`` once (issue 28, point 4): in its task message, not
again in its system prompt. Checked on the request the child actually sends."""
from __future__ import annotations

import pytest

from offload.agent.core import AIAgent
from offload.subagents.child import build_child_agent, run_single_child
from offload.testing.model_server import text_reply

pytestmark = pytest.mark.timeout(60)

CONTEXT = "The build server is ci-7; its logs are under /var/log/ci; the flaky test is test_upload."


def test_the_child_request_carries_the_context_once(model_server, tmp_path):
    server = model_server(text_reply("Looked at it."), model_ids=None)
    parent = AIAgent(model="m", base_url=server.url, api_key=None, toolsets=["delegation"], workspace=tmp_path)
    child = build_child_agent(task_index=0, goal="Find why the upload test flakes.", context=CONTEXT, toolsets=None,
                              role="leaf", creds={}, max_iterations=2, parent_agent=parent)
    try:
        entry = run_single_child(0, "Find why the upload test flakes.", child=child, parent_agent=parent,
                                 context=CONTEXT)
    finally:
        child.close()
    assert entry["status"] == "completed"
    [request] = server.requests
    texts = [m.get("content") or "" for m in request["messages"]]
    assert sum(text.count(CONTEXT) for text in texts) == 1, texts
    assert CONTEXT in texts[-1]  # with the task, where the child reads what to do
    assert "comes with the task message" in texts[0]
