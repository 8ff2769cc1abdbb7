"""Unknown stays unknown (issue 39, point 2), through ``offload run`` against the scripted model
server: a child whose server sends no usage has null tokens in the result document (never 0),
a child the server rejected with HTTP 400 is "rejected by the server; no usage" (not "reported
no usage"), and a reply that ended without a finish_reason is not blamed on a token limit."""
from __future__ import annotations

import json

import pytest

from offload.testing.demo_script import subagent_goal
from offload.testing.model_server import error_reply, text_reply
from tests.e2e.conftest import offload, parent_requests_with_results, scripted_parent

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def _children(document: dict) -> dict[str, dict]:
    [delegation] = document["delegations"]
    return {child["goal"]: child for child in delegation["children"]}


def test_a_server_without_usage_gives_null_tokens_in_the_document(model_server, write_config):
    server = model_server(scripted_parent(child=lambda request: text_reply("4", report_usage=False),
                                          delegate={"goal": "add two and two"}))
    write_config(server)
    done = offload("run", "--json", "go")
    assert done.returncode == 0, done
    child = _children(json.loads(done.stdout))["add two and two"]
    assert child["state"] == "completed" and child["api_calls"] == 1
    assert child["tokens"] == {"input": None, "output": None, "unknown": "not_reported"}, child
    assert "1 model run(s) whose server reported no usage — not counted (unknown)" in done.stderr


def test_a_rejected_child_is_said_to_be_rejected_not_unreported(model_server, write_config):
    def child(request):
        if subagent_goal(request) == "the bad one":
            return error_reply(400, "prompt is malformed")
        return text_reply("fine")

    tasks = {"tasks": [{"goal": "the good one"}, {"goal": "the bad one"}]}
    server = model_server(scripted_parent(child=child, delegate=tasks))
    write_config(server)
    done = offload("run", "--json", "go")
    assert done.returncode == 0, done.stderr  # one child completed
    children = _children(json.loads(done.stdout))
    assert children["the bad one"]["state"] == "failed"
    assert children["the bad one"]["tokens"] == {"input": None, "output": None, "unknown": "rejected"}, children["the bad one"]
    assert isinstance(children["the good one"]["tokens"]["input"], int) and children["the good one"]["tokens"]["input"] > 0
    assert "1 model run(s) rejected by the server; no usage" in done.stderr, done.stderr
    assert "reported no usage" not in done.stderr


def test_a_reply_without_finish_reason_is_not_blamed_on_a_token_limit(model_server, write_config):
    server = model_server(scripted_parent(child=lambda request: text_reply("The answer is", send_finish=False),
                                          delegate={"goal": "answer the question"}))
    write_config(server)
    done = offload("run", "go")
    assert done.returncode == 5, done  # cut off: the exit code of a truncated reply
    [injected] = parent_requests_with_results(server)
    text = injected["messages"][-1]["content"]
    assert "the stream ended without a finish_reason" in text, text
    assert "output token limit" not in text
    assert "ended the stream early" in text
    assert "cut off (no finish_reason) — incomplete" in text  # the task header, not the client's word "missing"


def test_a_reply_cut_at_the_length_limit_still_suggests_raising_it(model_server, write_config):
    server = model_server(scripted_parent(child=lambda request: text_reply("The answer is", finish_reason="length"),
                                          delegate={"goal": "answer the question"}))
    write_config(server)
    done = offload("run", "go")
    assert done.returncode == 5, done
    [injected] = parent_requests_with_results(server)
    assert "raise the server's output token limit" in injected["messages"][-1]["content"]
