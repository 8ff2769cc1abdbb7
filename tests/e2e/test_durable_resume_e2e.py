"""Resume, not restart (issue 44): an ``offload run`` owner killed with SIGKILL mid-child, and a
new ``offload run --resume`` that continues the child from its last logged step.

The child's one side-effecting tool is a marker command that appends a line to a file in the
workspace each time it runs, so the file counts its executions. Checked: no result lost, the
side-effecting call never executed twice (the model is told the host died while it ran), at
most one model call issued again per death, and the result says it was resumed.
"""
from __future__ import annotations

import os

import pytest
import yaml

from offload.agent.step_log import HOST_DIED
from offload.testing.demo_script import request_role, subagent_goal
from offload.testing.model_server import hang_reply, last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, offload, scripted_parent, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
MARKER = "echo ran >> marker.txt && sleep 300"


@pytest.fixture
def write_config(write_config, _isolated_hermes_home):
    """As the harness's with ``delegation.resume: auto`` (explicit, though it is the default), plus the test's
    PostgreSQL ledger (``OFFLOAD_TEST_LEDGER=postgresql``): the CLI's environment drops ``OFFLOAD_LEDGER_URL``, so it goes in config.yaml, with a short
    lease so a dead owner on this host is recovered within seconds."""
    def write(server, **delegation):
        data = write_config(server, **{"resume": "auto", **delegation})
        if os.environ.get("OFFLOAD_LEDGER_URL"):
            data["ledger"] = {"url": os.environ["OFFLOAD_LEDGER_URL"], "lease_seconds": 4, "heartbeat_seconds": 1}
            (_isolated_hermes_home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
        return data
    return write


def _child_requests(server) -> list[dict]:
    return [r for r in server.requests if request_role(r) == "subagent"]


def _marks_once(request):
    """The child: runs the marker command, and once told the host died while it ran, checks and ends."""
    if HOST_DIED in last_message_text(request):
        return text_reply("Checked marker.txt: the command ran once. Done.")
    return tool_call_reply("run_command", {"command": MARKER, "timeout_s": 600})


def _start_and_kill(cli, ready, **env) -> tuple[str, str, str]:
    """``offload run`` (``env`` added to its environment) until ``ready(delegation id)``, then
    SIGKILL; its session, delegation id and output."""
    run = cli("run", "do the marked thing", **env)
    did = run.wait_for(HANDLE_RE).group(1)
    until(lambda: ready(did), "the child reached the point where the owner is killed")
    run.kill()
    return run.wait_for(SESSION_RE).group(1), did, run.output


def _resume(cli, sid: str, code: int = 0):
    again = cli("run", "--resume", sid)
    assert again.finish(timeout_s=90) == code, again.output
    return again


def test_a_side_effecting_call_cut_by_the_death_is_never_run_again(cli, model_server, write_config, runtime,
                                                                    workspace):
    server = model_server(scripted_parent(child=_marks_once, delegate={"goal": "mark once"},
                                          on_result=text_reply("The resumed child is done.")))
    write_config(server)
    marker = workspace / "marker.txt"
    sid, did, said = _start_and_kill(cli, lambda did: marker.exists())
    steps = runtime.ledger().read_steps(did)
    assert [s.kind for s in steps] == ["reply", "tool_start"], said  # the reply, then the start mark, no result
    again = _resume(cli, sid)
    assert marker.read_text().splitlines() == ["ran"]  # executed exactly once
    row = runtime.ledger().get(did)
    entry = row.result["results"][0]
    assert row.state == "completed" and entry["status"] == "completed", row.result
    assert entry["resumed"]["unknown_calls"] == ["run_command"] and entry["resumed"]["calls_rerun"] == 0
    assert entry["resumed"]["replies_kept"] == 1
    assert len(_child_requests(server)) == 2  # the first reply was kept: one new model call only
    assert "The resumed child is done." in again.output
    assert runtime.ledger().read_steps(did) == []  # dropped once the result was recorded


def test_a_model_call_in_flight_at_the_death_is_issued_once_more(cli, model_server, write_config, runtime):
    def child(request):
        if len(_child_requests(server)) == 1:
            return hang_reply("thinking")  # the first call streams until the owner dies
        return text_reply("Answered on the second try.")

    server = model_server(scripted_parent(child=child, delegate={"goal": "answer"},
                                          on_result=text_reply("Got it.")))
    write_config(server)
    sid, did, said = _start_and_kill(cli, lambda did: _child_requests(server))
    assert runtime.ledger().read_steps(did) == []  # nothing logged: the reply never arrived
    assert cli("inbox").finish() == 0  # a command that only looks adopts nothing, settles nothing
    assert runtime.ledger().get(did).state == "running" and len(_child_requests(server)) == 1
    _resume(cli, sid)
    row = runtime.ledger().get(did)
    assert row.state == "completed" and row.result["results"][0]["summary"] == "Answered on the second try."
    assert len(_child_requests(server)) == 2  # issued again exactly once
    resumed = row.result["results"][0]["resumed"]
    assert (resumed["resumes"], resumed["from_step"], resumed["model_calls_reissued"]) == (1, 0, 1)  # counted


def test_a_taker_with_resume_never_reports_the_child_unknown_with_the_reason(cli, model_server, write_config,
                                                                             runtime):
    server = model_server(scripted_parent(child=lambda r: hang_reply("thinking"), delegate={"goal": "answer"},
                                          on_result=text_reply("Noted.")))
    write_config(server)  # dispatched with resume: auto (its steps logged) ...
    sid, did, said = _start_and_kill(cli, lambda did: _child_requests(server))
    write_config(server, resume="never")  # ... taken over by a process configured with never
    _resume(cli, sid, code=6)  # no subagent completed
    row = runtime.ledger().get(did)
    assert row.state == "unknown" and "delegation.resume is `never`" in row.event["error"]
    assert len(_child_requests(server)) == 1


def test_a_taker_in_another_workspace_keeps_the_finished_child_and_reports_the_other_unknown(
        cli, model_server, write_config, runtime, tmp_path):
    def child(request):
        return text_reply("quick answer") if "quick" in subagent_goal(request) else hang_reply("thinking")

    server = model_server(scripted_parent(child=child, delegate={"tasks": [{"goal": "quick part"},
                                                                           {"goal": "slow part"}]},
                                          on_result=text_reply("Noted.")))
    write_config(server)
    sid, did, said = _start_and_kill(cli, lambda did: len((runtime.ledger().get(did).result or {})
                                                          .get("results") or []) == 1)  # the quick child recorded
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = {**write_config(server), "workspace": str(elsewhere)}  # the taker cannot continue the child here
    (runtime.home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    cli("run", "--resume", sid).finish(timeout_s=90)
    row = runtime.ledger().get(did)
    quick, slow = row.result["results"]
    assert (quick["status"], quick["summary"]) == ("completed", "quick answer"), row.result  # kept
    assert slow["status"] == "unknown" and "worked in" in slow["error"] and str(elsewhere) in slow["error"], slow
    assert len(_child_requests(server)) == 2  # the slow child was not asked again


@pytest.mark.parametrize("taker_key", [None, "sk-the-owners-key"])
def test_a_taker_without_the_key_the_children_used_reports_them_unknown_saying_so(
        cli, model_server, write_config, runtime, taker_key):
    def child(request):  # the first call hangs until its owner is killed; a resumed child answers
        return hang_reply("thinking") if len(_child_requests(server)) == 1 else text_reply("the answer")

    server = model_server(scripted_parent(child=child, delegate={"goal": "answer"}, on_result=text_reply("Noted.")))
    write_config(server)
    sid, did, said = _start_and_kill(cli, lambda did: _child_requests(server), OFFLOAD_API_KEY="sk-the-owners-key")
    taker = {"OFFLOAD_API_KEY": taker_key} if taker_key else {}
    cli("run", "--resume", sid, **taker).finish(timeout_s=90)
    (entry,) = runtime.ledger().get(did).result["results"]
    if taker_key:  # the control: a taker with a key continues the child
        assert entry["status"] == "completed" and entry["summary"] == "the answer", entry
        assert len(_child_requests(server)) == 2
    else:
        assert entry["status"] == "unknown" and "with an API key" in entry["error"], entry
        assert server.url in entry["error"] and "OFFLOAD_API_KEY" in entry["error"], entry
        assert len(_child_requests(server)) == 1  # never called without the key


def _plain_config(home, server, workspace, **delegation) -> None:
    """config.yaml with no ``delegation.resume`` unless given (``write_config`` here always sets it)."""
    data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "delegation"]}
    if delegation:
        data["delegation"] = delegation
    if os.environ.get("OFFLOAD_LEDGER_URL"):
        data["ledger"] = {"url": os.environ["OFFLOAD_LEDGER_URL"], "lease_seconds": 4, "heartbeat_seconds": 1}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def test_by_default_a_killed_child_is_resumed(cli, model_server, runtime, workspace, _isolated_hermes_home):
    server = model_server(scripted_parent(child=_marks_once, delegate={"goal": "mark once"},
                                          on_result=text_reply("The resumed child is done.")))
    _plain_config(_isolated_hermes_home, server, workspace)  # no delegation.resume: the default, auto
    marker = workspace / "marker.txt"
    sid, did, said = _start_and_kill(cli, lambda did: marker.exists())
    assert [s.kind for s in runtime.ledger().read_steps(did)] == ["reply", "tool_start"], said
    again = _resume(cli, sid)
    row = runtime.ledger().get(did)
    assert row.state == "completed" and row.result["results"][0]["resumed"]["resumes"] == 1, row.result
    assert marker.read_text().splitlines() == ["ran"]
    assert "The resumed child is done." in again.output


def test_with_resume_never_nothing_is_logged_and_a_killed_child_is_unknown(cli, model_server, runtime, workspace,
                                                                           _isolated_hermes_home):
    server = model_server(scripted_parent(child=lambda r: tool_call_reply("run_command", {"command": MARKER}),
                                          delegate={"goal": "mark once"}, on_result=text_reply("Noted.")))
    _plain_config(_isolated_hermes_home, server, workspace, resume="never")
    sid, did, said = _start_and_kill(cli, lambda did: (workspace / "marker.txt").exists())
    assert runtime.ledger().read_steps(did) == [] and "durable" not in runtime.ledger().get(did).task
    _resume(cli, sid, code=6)
    assert runtime.ledger().get(did).state == "unknown"


def _pending_requests(runtime) -> list[dict]:
    from offload.subagents.approvals import pending

    return pending(runtime.ledger())


def test_a_command_waiting_for_approval_when_the_owner_died_is_asked_again(cli, model_server, write_config,
                                                                           runtime, workspace):
    """The start mark means "the effect may have begun": a command still waiting for a person's
    approval never started, so the resumed child runs the call again and asks again (the dead
    owner's request is withdrawn), and the command runs once, after the new approval."""
    command = "rm -rf build && echo ran >> marker.txt"

    def child(request):
        if last_message_text(request).startswith("[approved by"):
            return text_reply("Cleaned the build once.")
        return tool_call_reply("run_command", {"command": command})

    (workspace / "build").mkdir()
    server = model_server(scripted_parent(child=child, delegate={"goal": "clean the build"},
                                          on_result=text_reply("The build is clean.")))
    write_config(server, approvals="ask")
    run = cli("run", "--ask-approvals", "clean the build")
    did = run.wait_for(HANDLE_RE).group(1)
    [first] = until(lambda: _pending_requests(runtime), "the child's approval request")
    run.kill()
    sid = run.wait_for(SESSION_RE).group(1)
    assert [s.kind for s in runtime.ledger().read_steps(did)] == ["reply"]  # no start mark: it never began
    again = cli("run", "--resume", sid, "--ask-approvals")
    [second] = until(lambda: [r for r in _pending_requests(runtime) if r["request_id"] != first["request_id"]],
                     "the resumed child asking again")
    assert second["command"] == command and second["delegation_id"] == did
    old = runtime.ledger().approvals(request_id=first["request_id"])[0]
    assert old["state"] == "denied" and old["decided_by"].startswith("resume: its owner died"), old
    assert not (workspace / "marker.txt").exists() and (workspace / "build").exists()  # nothing ran yet
    answer = offload("approvals", "approve", second["request_id"], "--by", "alice",
                     HERMES_HOME=str(runtime.home))
    assert answer.returncode == 0, answer
    assert again.finish(timeout_s=90) == 0, again.output
    assert (workspace / "marker.txt").read_text().splitlines() == ["ran"]  # ran once, after the approval
    assert not (workspace / "build").exists()
    entry = runtime.ledger().get(did).result["results"][0]
    assert entry["status"] == "completed" and entry["resumed"]["calls_rerun"] == 1, entry
    assert entry["resumed"]["unknown_calls"] == []  # never "the host died": it had not started
    assert len(_child_requests(server)) == 2  # the kept reply was not asked for again
