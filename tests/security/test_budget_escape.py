"""A hostile subagent cannot spend past its caps through descendants (issue 40, point 5).

End to end in ``offload run`` against the scripted model: an orchestrator child that delegates
again and again to workers that never stop (each model call books tokens), a tree that fans
out inline, and a child whose command starts ``python -m offload run`` itself. Every model
call's tokens are read back from the ledger's spend table."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from offload.testing.demo_script import last_role, request_role, subagent_goal
from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import cli_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def write_config(home: Path, server: ScriptedModelServer, workspace: Path, **delegation: Any) -> None:
    data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "delegation"], "terminal": {"sandbox": "none"},
            "delegation": {"max_spawn_depth": 2, "background": False, **delegation}}
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def run(home_env: dict[str, str], prompt: str, cwd: Path) -> Any:
    """``offload run PROMPT``; ``home_env``: HERMES_HOME, or HOME alone (the default home under it)."""
    env = {k: v for k, v in cli_env(**home_env).items() if k != "HERMES_HOME" or "HERMES_HOME" in home_env}
    return subprocess.run([sys.executable, "-m", "offload", "run", prompt], capture_output=True, text=True,
                          env=env, timeout=150, stdin=subprocess.DEVNULL, cwd=cwd)


def spend_rows(state_db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(state_db) as db:
        return db.execute("SELECT session_key, SUM(tokens) FROM async_delegation_spend GROUP BY session_key").fetchall()


def hostile_tree(request: dict[str, Any]):
    """The parent delegates one orchestrator; the orchestrator delegates a worker after every
    result; a worker runs one more command after every result, forever."""
    if request_role(request) == "parent":
        if last_role(request) == "tool":
            return text_reply("Done.")
        return tool_call_reply("delegate_task", {"goal": "orchestrate the digging", "role": "orchestrator"})
    if subagent_goal(request).startswith("orchestrate"):
        return tool_call_reply("delegate_task", {"goal": "dig forever", "background": False})
    return tool_call_reply("run_command", {"command": "echo digging"}, text="Still digging.")


def subagent_calls(server: ScriptedModelServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if request_role(r) == "subagent"]


@pytest.mark.parametrize("caps", [{"max_tokens_per_delegation": 3000, "max_tokens_per_session": 5000},
                                  {"max_tokens_per_session": 3000}],  # the case: a session cap alone
                         ids=["delegation-cap", "session-cap-alone"])
def test_a_grandchilds_spend_counts_against_the_root_session_and_delegation(tmp_path: Path, caps) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    with ScriptedModelServer(hostile_tree) as server:
        write_config(home, server, workspace, **caps, max_iterations=40)
        done = run({"HERMES_HOME": str(home)}, "dig", workspace)
        assert done.returncode in (0, 5), done  # 5: no subagent completed (they were stopped)
        calls = subagent_calls(server)
    rows = spend_rows(home / "state.db")
    assert len(rows) == 1 and "-sub" not in rows[0][0], rows  # all booked to the root session
    biggest_call = 3000  # one model call's tokens here are far fewer: the call that crosses completes
    assert rows[0][1] < 3000 + biggest_call, (rows, len(calls))
    assert len(calls) < 40  # the orchestrator and its workers stopped at the root delegation's budget


def test_nested_inline_delegations_obey_max_concurrent_children(tmp_path: Path) -> None:
    """Three orchestrators, each asking for three workers inline: with a cap of 4 agents per tree,
    at most one nested call fits; the others are refused naming the key."""
    def fan_out(request: dict[str, Any]):
        if request_role(request) == "parent":
            if last_role(request) == "tool":
                return text_reply("Done.")
            tasks = [{"goal": f"orchestrate part {i}"} for i in range(3)]
            return tool_call_reply("delegate_task", {"tasks": tasks, "role": "orchestrator"})
        if subagent_goal(request).startswith("orchestrate"):
            if last_role(request) == "tool":
                return text_reply(f"ORCHESTRATOR SAW: {last_message_text(request)[:400]}")
            return tool_call_reply("delegate_task", {"tasks": [{"goal": f"work {i}"} for i in range(3)],
                                                     "background": False})
        return text_reply("worked")

    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    with ScriptedModelServer(fan_out) as server:
        write_config(home, server, workspace, max_concurrent_children=4)
        done = run({"HERMES_HOME": str(home)}, "fan out", workspace)
        assert done.returncode == 0, done
        nested = [json.loads(m["content"]) for r in subagent_calls(server) for m in r["messages"][-1:]
                  if m["role"] == "tool"]
    refused = [n for n in nested if n.get("status") == "error"]
    ran = [n for n in nested if n.get("status") == "completed"]
    assert len(refused) + len(ran) == 3 and len(refused) >= 2, nested
    assert all("delegation.max_concurrent_children=4, which counts every level" in n["error"] for n in refused)


def test_an_offload_run_started_by_a_childs_command_stays_in_its_tree(tmp_path: Path) -> None:
    """The child runs ``python -m offload run`` itself (its home resolved from $HOME, which the
    command keeps): the nested run's parent is at the child's depth, so with max_spawn_depth=1
    its delegate_task is refused instead of starting a new, uncapped tree."""
    nested_command = f"{sys.executable} -m offload run 'nested: spend more'"

    def script(request: dict[str, Any]):
        text = last_message_text(request)
        if request_role(request) == "parent":
            if last_role(request) == "tool":
                return text_reply(f"PARENT SAW: {text[:300]}")
            return tool_call_reply("delegate_task", {"goal": "run it yourself"})
        if last_role(request) == "tool":
            return text_reply(f"CHILD SAW: {text[-600:]}")
        return tool_call_reply("run_command", {"command": nested_command, "timeout_s": 100})

    user_home, workspace = tmp_path / "user", tmp_path / "ws"
    workspace.mkdir()
    with ScriptedModelServer(script) as server:
        write_config(user_home / ".hermes", server, workspace, max_spawn_depth=1, max_tokens_per_session=100_000)
        done = run({"HOME": str(user_home)}, "delegate it", workspace)
        assert done.returncode == 0, done
        nested_parent_results = [r["messages"][-1]["content"] for r in server.requests
                                 if request_role(r) == "parent" and r["messages"][-1]["role"] == "tool"
                                 and "nested: spend more" in json.dumps(r["messages"][:3])]
        children = subagent_calls(server)
    [refusal] = nested_parent_results
    assert "depth limit reached: this agent is at spawn depth 1" in refusal, refusal
    assert len(children) == 2  # the one child's command call and its report: the nested run started none
    assert [key for key, _ in spend_rows(user_home / ".hermes" / "state.db") if "-sub" in key] == []
