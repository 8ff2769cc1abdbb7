"""The admission queue end to end (issue 29 item 3), as a user drives it with the scripted
model: a chat at capacity queues its second delegation (the handle, ``/agents``, ``offload
agents --json`` from another process, the dashboard's roster say ``queued``) and starts it
when the slot frees; a chat killed with a unit queued leaves the row to the next process --
``offload run --resume`` after a restart, or another live owner of the same ledger -- which
starts it, rebuilt from the ledger, and the result reaches its session (the killed chat's
running unit is resumed by the restart too)."""
from __future__ import annotations

import json
import threading

import pytest

from offload.testing.demo_script import last_role, request_role, subagent_goal
from offload.testing.model_server import last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, offload, open_dashboard, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
QUEUED_RE = r"delegated 1 task\(s\) in the background: (deleg_[0-9a-f]+) \(queued"


def two_calls_parent(child):
    """A parent that delegates the goal named in each user message ("delegate: GOAL")."""
    def script(request):
        if request_role(request) == "subagent":
            return child(request)
        if last_role(request) == "tool":
            return text_reply("Started it.")
        text = last_message_text(request)
        if text.startswith("[ASYNC DELEGATION"):
            return text_reply("Result noted.")
        return tool_call_reply("delegate_task", {"goal": text.split("delegate: ", 1)[1].strip()})
    return script


def gated_child(release: threading.Event):
    def child(request):
        if subagent_goal(request).startswith("slow"):
            release.wait(60)
        return text_reply(f"finished {subagent_goal(request)}")
    return child


def agents_json() -> dict:
    done = offload("agents", "--json")
    assert done.returncode == 0, done
    return json.loads(done.stdout)


def at_capacity(cli, server, write_config, **delegation):
    """A chat whose one slot is held by a slow child, with a second delegation queued behind it."""
    write_config(server, max_concurrent_children=1, **delegation)
    chat = cli("chat")
    sid = chat.wait_for(SESSION_RE).group(1)
    chat.send("delegate: slow survey of the repo")
    first = chat.wait_for(HANDLE_RE).group(1)
    chat.wait_for(r"agent> Started it\.")
    mark = chat.mark()
    chat.send("delegate: quick follow-up check")
    second = chat.wait_for(QUEUED_RE, start=mark).group(1)
    chat.wait_for(r"agent> Started it\.", start=mark)
    return chat, sid, first, second


def test_a_chat_at_capacity_queues_the_call_shows_it_queued_everywhere_and_starts_it_when_the_slot_frees(
        cli, model_server, write_config):
    release = threading.Event()
    server = model_server(two_calls_parent(gated_child(release)))
    chat, _sid, first, second = at_capacity(cli, server, write_config)
    try:
        mark = chat.mark()
        chat.send("/agents")
        chat.wait_for(rf"{second}\s+queued", start=mark)

        listed = agents_json()  # another process reads the ledger
        [queued] = listed["queued"]
        assert queued["id"] == second and queued["state"] == "queued"
        assert [c["state"] for c in queued["children"]] == ["queued"] and queued["owner"] == "running"
        assert [r["id"] for r in listed["running"]] == [first]
        assert f"{second}  queued" in offload("agents").stdout and "#1 in line" in offload("agents").stdout
        inbox = offload("inbox", "--json")
        assert [r["id"] for r in json.loads(inbox.stdout)["queued"]] == [second]
        shown = offload("inbox", "--show", second, "--json")
        assert json.loads(shown.stdout)["state"] == "queued"
        assert "1 unit(s) queued" in offload("inbox").stdout

        roster = open_dashboard(cli).get("/", timeout=10).text
        assert f'id="unit-{second}" data-status="queued"' in roster
    finally:
        release.set()
    chat.wait_for(rf"background result {first} landed")
    chat.wait_for(rf"background result {second} landed")
    chat.send("/quit")
    assert chat.finish() == 0
    done = {r["id"]: r["state"] for r in agents_json()["recent"]}
    assert done[first] == done[second] == "completed" and agents_json()["queued"] == []


def queued_then_killed(cli, server, write_config, *, others_live: bool = False) -> tuple[str, str, str]:
    """A chat holding the one slot with a slow child and one unit queued, killed (-9).
    ``others_live``: another owner of the ledger is up and may adopt the queued unit at once."""
    chat, sid, first, second = at_capacity(cli, server, write_config, resume="auto")
    chat.kill()
    queued = agents_json()["queued"]
    assert [row["id"] for row in queued] == ([second] if not others_live else [second] * len(queued))
    assert all(row["owner"] == "exited" for row in queued)
    return sid, first, second


def test_a_restart_finds_the_queued_unit_and_runs_it_for_its_session(cli, model_server, write_config):
    release = threading.Event()
    server = model_server(two_calls_parent(gated_child(release)))
    sid, first, second = queued_then_killed(cli, server, write_config)
    release.set()  # the killed chat's slow child died mid-call: the next process resumes it
    run = offload("run", "--resume", sid, "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    states = {d["id"]: d["state"] for d in document["delegations"]}
    assert states == {first: "completed", second: "completed"}, states
    summaries = {d["id"]: d["children"][0]["summary"] for d in document["delegations"]}
    assert summaries == {first: "finished slow survey of the repo", second: "finished quick follow-up check"}
    assert agents_json()["queued"] == []


def test_another_live_owner_of_the_ledger_starts_the_unit_of_one_that_died(cli, model_server, write_config):
    release = threading.Event()
    server = model_server(two_calls_parent(gated_child(release)))
    write_config(server, max_concurrent_children=1)
    other = cli("chat")  # a live owner of the same home, in its own session, idle
    other.wait_for(SESSION_RE)
    sid, first, second = queued_then_killed(cli, server, write_config, others_live=True)
    release.set()
    row = until(lambda: next((r for r in agents_json()["recent"] + agents_json()["pending"]
                              if r["id"] == second and r["state"] == "completed"), None),
                "the other owner ran the dead owner's queued unit")
    assert row["session"] == sid  # still its own session's result, whoever ran it
    assert row["owner_pid"] == other.proc.pid
    other.send("/quit")
    assert other.finish() == 0


def test_offload_stop_of_a_queued_unit_reports_it_stopped_to_its_chat_and_it_never_runs(
        cli, model_server, write_config):
    release = threading.Event()
    server = model_server(two_calls_parent(gated_child(release)))
    chat, _sid, first, second = at_capacity(cli, server, write_config)
    try:
        stopped = offload("stop", second[len("deleg_"):len("deleg_") + 8])  # a prefix, as a user types it
        assert stopped.returncode == 0, stopped.stderr
        assert f"stopped {second}" in stopped.stdout + stopped.stderr
        # another process stopped it: the chat reads the result from the ledger, as news from that
        # process (not as a replay of an earlier one's)
        chat.wait_for(rf"background result {second} landed \(from another process\): Subagent Task Interrupted")
    finally:
        release.set()
    stopped_one_never_ran(chat, server, first)


def stopped_one_never_ran(chat, server, first: str) -> list[str]:
    """After the queued unit was stopped: the first unit's result lands, the chat quits cleanly,
    and the stopped unit's goal never reached the model. The goals children were run with."""
    chat.wait_for(rf"background result {first} landed")
    chat.send("/quit")
    assert chat.finish() == 0
    goals = [subagent_goal(r) for r in server.requests if request_role(r) == "subagent"]
    assert "quick follow-up check" not in goals
    return goals
