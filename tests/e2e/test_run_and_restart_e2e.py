"""``offload run`` end to end, and a restart that replays a result the killed process never delivered."""
from __future__ import annotations

import time

import pytest

from offload.agent.session_store import SessionStore
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, parent_requests_with_results, scripted_parent
from offload.ledger.queries import pending_rows

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

TWO_TASKS = {"tasks": [{"goal": "alpha"}, {"goal": "beta"}]}


def answer_by_goal(request):
    from offload.testing.demo_script import subagent_goal
    return text_reply(f"{subagent_goal(request)} done", chunk_chars=3)


def test_run_waits_for_its_background_results_then_exits(cli, model_server, write_config, runtime):
    server = model_server(scripted_parent(child=answer_by_goal, delegate=TWO_TASKS,
                                          on_result=text_reply("Both subagents are done.")))
    write_config(server)
    run = cli("run", "do two things")
    assert run.finish() == 0
    did = run.wait_for(HANDLE_RE).group(1)
    out = run.output
    assert "waiting for 1 background result(s)" in out
    assert f"background result {did} landed" in out
    assert "alpha done" in out and "beta done" in out
    assert out.index("waiting for") < out.index("landed") < out.index("agent> Both subagents are done.")
    assert len(parent_requests_with_results(server)) == 1
    assert runtime.deliveries.get(did)["delivery_state"] == "delivered"


def test_run_sync_runs_delegations_inside_the_turn_and_says_so(cli, model_server, write_config):
    server = model_server(scripted_parent(child=answer_by_goal, delegate=TWO_TASKS,
                                          after_tool=text_reply("Both finished inside the turn.")))
    write_config(server)
    run = cli("run", "--sync", "do two things")
    assert run.finish() == 0
    out = run.output
    assert "delegate_task ran 2 task(s) synchronously" in out
    assert "--sync: delegations ran synchronously" in out
    assert "agent> Both finished inside the turn." in out
    assert "waiting for" not in out and "landed" not in out
    tool_results = [m["content"] for r in server.requests for m in r["messages"] if m["role"] == "tool"]
    assert any("alpha done" in t and "beta done" in t for t in tool_results)


def wait_for_pending_row(runtime, session_id: str, timeout_s: float = 30.0):
    """The ledger row of ``session_id`` once its result is recorded (owner still alive)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = [r for r in pending_rows(runtime.ledger()) if r.parent_session_id == session_id]
        if rows:
            return rows[0]
        time.sleep(0.05)
    pytest.fail(f"no finished delegation of {session_id} reached the ledger within {timeout_s} s")


def test_restart_replays_an_undelivered_result_once(cli, model_server, write_config, runtime):
    server = model_server(scripted_parent(
        child=lambda r: text_reply("child result 7"), delegate={"goal": "find the number"},
        after_tool=hang_reply("Started; "),  # the parent's turn never ends, so nothing is delivered
        on_result=text_reply("Replayed result noted: 7.")))
    write_config(server)

    first = cli("chat")
    sid = first.wait_for(SESSION_RE).group(1)
    first.send("go")
    row = wait_for_pending_row(runtime, sid)
    assert row.state == "completed" and row.delivery_state == "pending"
    first.kill()  # SIGKILL after the result was recorded, before any delivery
    assert "landed" not in first.output

    second = cli("chat", "--resume", sid)
    second.wait_for(rf"background result {row.delegation_id} landed \(replayed from the ledger\)")
    second.wait_for(r"agent> Replayed result noted: 7\.")
    second.send("/quit")
    assert second.finish() == 0
    assert "child result 7" in second.output
    assert runtime.deliveries.get(row.delegation_id)["delivery_state"] == "delivered"
    with SessionStore() as store:
        assert store.was_injected(sid, row.delegation_id)

    third = cli("run", "--resume", sid)
    assert third.finish() == 0
    assert "landed" not in third.output
    assert len(parent_requests_with_results(server)) == 1  # injected exactly once across three processes
