"""What a background child may not do, as a user of ``offload run`` sees it (issue 29).

The parent delegates; the child (the scripted model) tries something it must not, reads the
tool error, and reports it; the landed result carries the child's report of the refusal.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from offload.testing.demo_script import last_role, request_role
from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import offload, scripted_parent
from tests.toolsets.test_fetch_guard import Server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _config(home: Path, server: ScriptedModelServer, workspace: Path, **extra: Any) -> None:
    data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "web", "delegation"], **extra}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def _child_tool_results(server: ScriptedModelServer) -> list[str]:
    return [m["content"] for r in server.requests if request_role(r) == "subagent"
            for m in r["messages"][-1:] if m["role"] == "tool"]


def _child_calls(tool: str, arguments: dict[str, Any]):
    def child(request: dict[str, Any]):
        if last_role(request) == "tool":
            return text_reply(f"REPORT: {last_message_text(request)[:300]}")
        return tool_call_reply(tool, arguments)
    return child


def test_a_child_cannot_fetch_a_loopback_service(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    site = Server()
    url = f"http://127.0.0.1:{site.port}/page"
    script = scripted_parent(child=_child_calls("fetch_url", {"url": url}), delegate={"goal": "read the page"})
    try:
        with ScriptedModelServer(script) as server:
            _config(_isolated_hermes_home, server, tmp_path)
            done = offload("run", "read the local page", HERMES_HOME=str(_isolated_hermes_home))
            assert done.returncode == 0, done
            [refusal] = _child_tool_results(server)
    finally:
        site.close()
    assert "127.0.0.1 is a loopback address" in refusal and "web.allowed_hosts" in refusal, refusal
    assert site.seen == []  # nothing reached the service
    assert "REPORT:" in done.stdout + done.stderr and "loopback" in done.stdout + done.stderr


def _system_prompt(server: ScriptedModelServer) -> str:
    return next(r["messages"][0]["content"] for r in server.requests if request_role(r) == "subagent")


@pytest.mark.parametrize("tool,arguments,needles", [
    ("read_file", {"path": "hermes-home/config.yaml"}, ["is in offload's own home", "hermes-home"]),
    ("run_command", {"command": "cat hermes-home/state.db"}, ["is in offload's own home"]),
    ("delegate_task", {"goal": "split the reading"}, ["'delegate_task' is not available to a subagent (role leaf)",
                                                       "delegation.leaf_tools"]),
])
def test_a_child_cannot_read_offloads_home_or_use_a_tool_off_its_list(
        _isolated_hermes_home: Path, tmp_path: Path, tool: str, arguments: dict[str, Any], needles: list[str]) -> None:
    """The workspace holds offload's home (as ~ holds ~/.hermes when offload starts in ~)."""
    assert _isolated_hermes_home.parent == tmp_path
    script = scripted_parent(child=_child_calls(tool, arguments), delegate={"goal": "read the notes"})
    with ScriptedModelServer(script) as server:
        _config(_isolated_hermes_home, server, tmp_path, delegation={"max_spawn_depth": 3})
        done = offload("run", "read the notes", HERMES_HOME=str(_isolated_hermes_home))
        assert done.returncode == 0, done
        [refusal] = _child_tool_results(server)
        prompt = _system_prompt(server)
    for needle in needles:
        assert needle in refusal, refusal
    assert "Your tools (role leaf): run_command, read_file, write_file, patch_file, search_files, list_files, " \
           "fetch_url." in prompt
    assert "REPORT: Error:" in done.stdout + done.stderr


def test_config_show_lists_what_each_role_may_use(_isolated_hermes_home: Path) -> None:
    shown = offload("config", "show", HERMES_HOME=str(_isolated_hermes_home))
    assert shown.returncode == 0, shown
    assert "  leaf_tools:\n  - read_file\n  - write_file\n" in shown.stdout and "fetch_url" in shown.stdout
    assert "orchestrator_tools:" in shown.stdout and "  - delegate_task\n" in shown.stdout
    assert "web:\n  allowed_hosts: []" in shown.stdout


def _parent_tool_results(server: ScriptedModelServer) -> list[str]:
    return [r["messages"][-1]["content"] for r in server.requests
            if request_role(r) == "parent" and r["messages"][-1]["role"] == "tool"]


def _run_inline(home: Path, tmp_path: Path, child, delegation: dict[str, Any], runs: int = 1) -> tuple[list[str], int]:
    """``offload run`` ``runs`` times (a new session each) with a parent that delegates inline to
    ``child`` under the ``delegation`` keys: the parent's tool results, and the children's model calls."""
    script = scripted_parent(child=child, delegate={"goal": "count the words", "background": False})
    with ScriptedModelServer(script) as server:
        _config(home, server, tmp_path, delegation=delegation)
        for _ in range(runs):
            done = offload("run", "count the words", HERMES_HOME=str(home))
            assert done.returncode == 0, done
        return _parent_tool_results(server), len([r for r in server.requests if request_role(r) == "subagent"])


def _working_child(**reply: Any):
    def child(request: dict[str, Any]):  # would work forever: one more command after each result
        return tool_call_reply("run_command", {"command": "echo step"}, text="Found part one.", **reply)
    return child


def test_a_child_stops_at_its_delegations_token_budget_with_its_partial_result(
        _isolated_hermes_home: Path, tmp_path: Path) -> None:
    [result], calls = _run_inline(_isolated_hermes_home, tmp_path, _working_child(), {"max_tokens_per_delegation": 50})
    assert calls == 1  # the call that crossed the budget completed; no further call was made
    entry = json.loads(result)["results"][0]
    assert (entry["status"], entry["exit_reason"], entry["summary"]) == ("interrupted", "token_budget", "Found part one.")
    assert "stopped at its token budget" in entry["error"] and "delegation.max_tokens_per_delegation=50" in entry["error"]


def test_a_session_over_the_daily_budget_is_refused_naming_it(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    # two sessions: the first spends the day's budget, the second is refused
    (first, second), calls = _run_inline(_isolated_hermes_home, tmp_path, lambda r: text_reply("The notes say hello."),
                                         {"max_tokens_per_day": 100}, runs=2)
    assert json.loads(first)["status"] == "completed" and calls == 1
    refusal = json.loads(second)
    assert refusal["status"] == "error" and "delegation.max_tokens_per_day=100" in refusal["error"]
    assert "subagents have used" in refusal["error"] and "00:00 UTC" in refusal["error"]


def test_a_child_stops_at_its_delegations_cost_budget_as_the_provider_reports_it(
        _isolated_hermes_home: Path, tmp_path: Path) -> None:
    # each call costs $0.03, reported as OpenRouter does (usage.cost)
    [result], calls = _run_inline(_isolated_hermes_home, tmp_path, _working_child(cost_usd=0.03),
                                  {"max_cost_usd_per_delegation": 0.05})
    assert calls == 2  # $0.03, then $0.06: the call that crossed the cap completed, no third
    entry = json.loads(result)["results"][0]
    assert (entry["status"], entry["exit_reason"], entry["summary"]) == ("interrupted", "cost_budget", "Found part one.")
    assert "spent $0.06 of delegation.max_cost_usd_per_delegation=$0.05" in entry["error"]
    assert entry["cost_usd"] == pytest.approx(0.06)


def test_under_a_cost_cap_a_cost_the_provider_does_not_report_stops_the_child_and_then_the_session(
        _isolated_hermes_home: Path, tmp_path: Path) -> None:
    """Unknown is never taken as 0: the child stops after its first call, and the next
    delegation of the day is refused, each naming the cap and the fix."""
    # a server that reports tokens but no cost (most do)
    (first, second), calls = _run_inline(_isolated_hermes_home, tmp_path, _working_child(),
                                         {"max_cost_usd_per_day": 5}, runs=2)
    assert calls == 1
    entry = json.loads(first)["results"][0]
    assert (entry["status"], entry["exit_reason"]) == ("interrupted", "cost_budget") and entry["cost_usd"] is None
    assert "did not report the cost of 1 of this delegation's model calls" in entry["error"]
    assert "delegation.max_cost_usd_per_day=5" in entry["error"]
    refusal = json.loads(second)
    assert refusal["status"] == "error" and "whose cost the provider did not report" in refusal["error"]
    assert "offload config set delegation.max_cost_usd_per_day null" in refusal["error"]


def test_a_session_over_the_daily_cost_budget_is_refused_naming_it(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    (first, second), _ = _run_inline(_isolated_hermes_home, tmp_path,
                                     lambda r: text_reply("The notes say hello.", cost_usd=0.6),
                                     {"max_cost_usd_per_day": 0.5}, runs=2)
    assert json.loads(first)["status"] == "completed"
    refusal = json.loads(second)
    assert refusal["status"] == "error" and "subagents have spent $0.6 today" in refusal["error"]
    assert "delegation.max_cost_usd_per_day=$0.5" in refusal["error"] and "00:00 UTC" in refusal["error"]
