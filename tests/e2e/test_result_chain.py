"""A model that answers every background result with more background work stops at
``delegation.max_result_chain`` (issue 28, point 5): the chain ends with a clear refusal the
model and the user both see, and ``offload run`` returns instead of running forever."""
from __future__ import annotations

import pytest

from offload.testing.demo_script import last_role, request_role
from offload.testing.model_server import Reply, text_reply, tool_call_reply
from tests.e2e.conftest import offload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _always_delegates(request: dict) -> Reply:
    if request_role(request) == "subagent":
        return text_reply("Checked; nothing more to do.")
    if last_role(request) == "tool":
        return text_reply("Started more background work.")
    return tool_call_reply("delegate_task", {"goal": "check the logs once more"})  # after every result, too


@pytest.mark.parametrize("limit", [0, 2])
def test_result_triggered_delegation_stops_at_the_configured_chain(model_server, write_config, limit):
    server = model_server(_always_delegates, model_ids=None)
    write_config(server, max_result_chain=limit)
    done = offload("run", "look into the failing build")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stderr  # the transcript; stdout holds the answers alone
    assert out.count("delegated 1 task(s) in the background") == limit + 1  # the person's, then `limit` more
    assert out.count("delegate_task refused: not dispatched: this turn answers a background result") == 1
    assert f"delegation.max_result_chain={limit}" in out
    refusal = [m for r in server.requests for m in r["messages"]
               if m.get("role") == "tool" and "max_result_chain" in (m.get("content") or "")]
    assert refusal, "the model never saw why nothing more was started"


def test_a_persons_turn_is_never_refused_even_with_a_zero_chain(model_server, write_config):
    server = model_server(_always_delegates, model_ids=None)
    write_config(server, max_result_chain=0)
    first = offload("run", "look into the failing build")
    second = offload("run", "and the flaky test", "--resume", "last")
    for done in (first, second):
        assert "delegated 1 task(s) in the background" in done.stderr, done.stdout + done.stderr
