"""Approval of a background child's risky command (issue 29 item 2), as a user of ``offload run``
and ``offload approvals`` sees it: denied by default naming the category and the key, allowed
per category, asked and answered from another terminal (recorded with the transcript and in
the tool trace; the wait is never a stall), denied when nobody answers in time."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from offload.testing.demo_script import last_role, request_role
from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import offload, scripted_parent, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

REMOVE = {"command": "rm -rf build && echo removed"}


def _child_runs(arguments: dict[str, Any]):
    def child(request: dict[str, Any]):
        if last_role(request) == "tool":
            return text_reply(f"REPORT: {last_message_text(request)[:400]}")
        return tool_call_reply("run_command", arguments)
    return child


def _setup(home: Path, server: ScriptedModelServer, workspace: Path, **delegation: Any) -> None:
    (workspace / "build").mkdir(parents=True)
    (workspace / "build" / "out.o").write_text("object")
    data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "delegation"], "delegation": delegation}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def _child_tool_results(server: ScriptedModelServer) -> list[str]:
    return [m["content"] for r in server.requests if request_role(r) == "subagent"
            for m in r["messages"][-1:] if m["role"] == "tool"]


def _run(home: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    done = offload("run", "--json", *extra, "clean the build", HERMES_HOME=str(home))
    assert done.returncode == 0, done
    return done, json.loads(done.stdout)


def _trace_step(document: dict[str, Any]) -> dict[str, Any]:
    [delegation] = document["delegations"]
    [child] = delegation["children"]
    [step] = child["tool_trace"]
    return step


def test_a_childs_destructive_command_is_denied_by_default(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    with ScriptedModelServer(scripted_parent(child=_child_runs(REMOVE), delegate={"goal": "clean"})) as server:
        _setup(_isolated_hermes_home, server, tmp_path / "ws")
        done, document = _run(_isolated_hermes_home)
        [refusal] = _child_tool_results(server)
    assert "command refused, not run: removes folders recursively (rm -r build)" in refusal, refusal
    assert "(category destructive)" in refusal and "delegation.approvals_by_category.destructive" in refusal
    assert (tmp_path / "ws" / "build" / "out.o").exists()
    step = _trace_step(document)
    assert (step["tool"], step["outcome"], step["approval"]["decision"], step["approval"]["by"]) == (
        "run_command", "error", "denied", "policy")


def test_a_category_the_operator_allows_runs(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    with ScriptedModelServer(scripted_parent(child=_child_runs(REMOVE), delegate={"goal": "clean"})) as server:
        _setup(_isolated_hermes_home, server, tmp_path / "ws", approvals_by_category={"destructive": "allow"})
        done, document = _run(_isolated_hermes_home)
        [output] = _child_tool_results(server)
    assert "exit code: 0" in output and "removed" in output, output
    assert not (tmp_path / "ws" / "build").exists()
    assert _trace_step(document)["approval"] == {"categories": ["destructive"], "decision": "allowed", "by": "policy"}


def test_offload_run_denies_ask_unless_told_to_wait(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    with ScriptedModelServer(scripted_parent(child=_child_runs(REMOVE), delegate={"goal": "clean"})) as server:
        _setup(_isolated_hermes_home, server, tmp_path / "ws", approvals="ask")
        _run(_isolated_hermes_home)
        [refusal] = _child_tool_results(server)
    assert "needs a person's approval" in refusal and "--ask-approvals" in refusal, refusal
    assert (tmp_path / "ws" / "build").exists()


def _pending(home: Path) -> list[dict[str, Any]]:
    listed = offload("approvals", "--json", HERMES_HOME=str(home))
    assert listed.returncode == 0, listed
    return json.loads(listed.stdout)


def test_a_request_answered_from_another_terminal_runs_and_is_recorded(
        _isolated_hermes_home: Path, tmp_path: Path, cli) -> None:
    """The child waits far longer than the stall thresholds: waiting for a person is not a stall."""
    with ScriptedModelServer(scripted_parent(child=_child_runs(REMOVE), delegate={"goal": "clean"})) as server:
        _setup(_isolated_hermes_home, server, tmp_path / "ws", approvals="ask", stall_idle_seconds=1,
               stall_in_tool_seconds=1, stall_grace_seconds=1, stall_check_interval_seconds=0.2)
        run = cli("run", "--json", "--ask-approvals", "clean the build")
        [request] = until(lambda: _pending(_isolated_hermes_home), "a pending approval request")
        assert request["command"] == REMOVE["command"] and request["categories"] == ["destructive"]
        listed = offload("approvals", HERMES_HOME=str(_isolated_hermes_home))
        assert request["request_id"] in listed.stdout and "rm -rf build" in listed.stdout, listed
        until(lambda: _journal_kinds(_isolated_hermes_home, request["delegation_id"]) >= {"approval_request"},
              "the request in the unit's journal", timeout_s=10)
        assert run.proc.poll() is None  # still waiting, 2+ stall thresholds later, and not stalled
        answer = offload("approvals", "approve", request["request_id"][:8], "--by", "alice",
                         HERMES_HOME=str(_isolated_hermes_home))
        assert answer.returncode == 0 and "allowed by alice" in answer.stdout, answer
        assert run.finish() == 0, run.output
        [output] = _child_tool_results(server)
    assert output.startswith(f"[approved by alice (request {request['request_id']})]\nexit code: 0"), output
    assert not (tmp_path / "ws" / "build").exists()
    document = json.loads(run.output[run.output.index("{\n"):])
    [delegation] = document["delegations"]
    assert delegation["state"] == "completed"
    step = _trace_step(document)
    assert step["approval"] == {"request_id": request["request_id"], "categories": ["destructive"],
                                "decision": "allowed", "by": "alice"}
    assert {"approval_request", "approval_decision"} <= _journal_kinds(_isolated_hermes_home, request["delegation_id"])
    again = offload("approvals", "deny", request["request_id"], HERMES_HOME=str(_isolated_hermes_home))
    assert again.returncode == 2 and "already decided: allowed by alice" in again.stderr, again


def _journal_kinds(home: Path, delegation_id: str) -> set[str]:
    from offload.ledger.select import open_selected_ledger

    ledger = open_selected_ledger(home / "state.db")
    try:
        return {entry.kind for entry in ledger.read_journal(delegation_id)}
    finally:
        ledger.close()


def test_a_denied_request_and_one_nobody_answers_are_refusals_the_child_reads(
        _isolated_hermes_home: Path, tmp_path: Path, cli) -> None:
    with ScriptedModelServer(scripted_parent(child=_child_runs(REMOVE), delegate={"goal": "clean"})) as server:
        _setup(_isolated_hermes_home, server, tmp_path / "ws", approvals="ask")
        run = cli("run", "--ask-approvals", "clean the build")
        [request] = until(lambda: _pending(_isolated_hermes_home), "a pending approval request")
        answer = offload("approvals", "deny", request["request_id"], "--by", "bob", HERMES_HOME=str(_isolated_hermes_home))
        assert answer.returncode == 0 and "denied by bob" in answer.stdout, answer
        assert run.finish() == 0, run.output
        [refusal] = _child_tool_results(server)
    assert "bob denied it" in refusal and request["request_id"] in refusal, refusal
    assert (tmp_path / "ws" / "build").exists()

    with ScriptedModelServer(scripted_parent(child=_child_runs({"command": "pip install left-pad"}),
                                             delegate={"goal": "install"})) as server:
        (_isolated_hermes_home / "config.yaml").write_text(yaml.safe_dump({
            "model": "demo-model", "base_url": server.url, "workspace": str(tmp_path / "ws"),
            "toolsets": ["terminal", "file", "delegation"],
            "delegation": {"approvals": "deny", "approvals_by_category": {"package_install": "ask"},
                           "approval_timeout_s": 0.5}}), encoding="utf-8")
        done = offload("run", "--ask-approvals", "install it", HERMES_HOME=str(_isolated_hermes_home))
        assert done.returncode == 0, done
        [refusal] = _child_tool_results(server)
    assert "nobody answered within 0.5 s (delegation.approval_timeout_s), which denies" in refusal, refusal


def test_config_show_and_set_validate_the_approval_keys(_isolated_hermes_home: Path) -> None:
    shown = offload("config", "show", HERMES_HOME=str(_isolated_hermes_home))
    assert "  approvals: deny\n" in shown.stdout and "  approval_timeout_s: 300.0\n" in shown.stdout, shown.stdout
    bad = offload("config", "set", "delegation.approvals_by_category", "{netwrk: ask}",
                  HERMES_HOME=str(_isolated_hermes_home))
    assert bad.returncode == 2 and "unknown category 'netwrk'" in bad.stderr and "network" in bad.stderr, bad
    bad = offload("config", "set", "delegation.approvals", "maybe", HERMES_HOME=str(_isolated_hermes_home))
    assert bad.returncode == 2 and "delegation.approvals" in bad.stderr, bad
    good = offload("config", "set", "delegation.approvals_by_category", "{network: ask, package_install: allow}",
                   HERMES_HOME=str(_isolated_hermes_home))
    assert good.returncode == 0, good
    shown = offload("config", "show", HERMES_HOME=str(_isolated_hermes_home))
    assert "approvals_by_category:\n    network: ask\n    package_install: allow" in shown.stdout, shown.stdout


def test_the_chat_shows_a_request_as_a_line_and_takes_approve(_isolated_hermes_home: Path, tmp_path: Path, cli) -> None:
    with ScriptedModelServer(scripted_parent(child=_child_runs(REMOVE), delegate={"goal": "clean"},
                                             on_result=text_reply("The build is clean."))) as server:
        _setup(_isolated_hermes_home, server, tmp_path / "ws", approvals="ask")
        chat = cli("chat")
        chat.send("clean the build")
        request_id = chat.wait_for(r"approval needed: (apr_[0-9a-f]+) .*rm -rf build.*/approve apr_").group(1)
        chat.send("/deny")
        chat.wait_for(r"usage: /deny ID")
        chat.send(f"/approve {request_id[:7]}")
        chat.wait_for(rf"{request_id}: allowed by chat:")
        chat.wait_for(r"agent> The build is clean\.")
        chat.send(f"/deny {request_id}")
        chat.wait_for(r"already decided: allowed by chat:")
        chat.send("/quit")
        assert chat.finish() == 0, chat.output
        [output] = _child_tool_results(server)
    assert output.startswith("[approved by chat:") and "exit code: 0" in output, output
    assert not (tmp_path / "ws" / "build").exists()
