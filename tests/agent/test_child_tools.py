"""What a subagent may use (issue 29 item 1): one declared list per role, delegate_task only for
an orchestrator within the depth limit, a clear error for a blocked call, the list in the
child's system prompt and config, and no reading of offload's own home."""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from offload.agent.core import AIAgent
from offload.agent.llm import AssistantTurn
from offload.config import ConfigError, OffloadConfig, set_value
from offload.runtime import tool_settings_of
from offload.subagents.args import DELEGATE_TASK_SCHEMA
from offload.toolsets.child_tools import (
    DEFAULT_LEAF_TOOLS, DEFAULT_ORCHESTRATOR_TOOLS, TOOLS_BY_TOOLSET, validate_tool_list,
)
from offload.toolsets.toolset_names import BUILTIN_TOOLSET_MODULES, DELEGATION_TOOLSET
from offload.toolsets.toolspec import Tool
from tests.toolsets.test_terminal_tool import _marked_alive, _sleep_marker

pytestmark = pytest.mark.timeout(60)
ALL = ["terminal", "file", "web", "delegation"]


class ScriptedLLM:
    def __init__(self, *turns: AssistantTurn) -> None:
        self.turns = list(turns)
        self.requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = []

    def stream_turn(self, messages, tools, *, on_activity=None, should_stop=None, on_text=None) -> AssistantTurn:
        self.requests.append((json.loads(json.dumps(messages)), tools))
        return self.turns.pop(0)


def tool_call(name: str, args: dict[str, Any]) -> AssistantTurn:
    return AssistantTurn("", [{"id": "c1", "name": name, "arguments_json": json.dumps(args)}], "tool_calls")


def parent(tmp_path: Path, home: Path | None = None, **config: Any) -> AIAgent:
    cfg = OffloadConfig.model_validate({"delegation": config})
    delegation = Tool("delegate_task", DELEGATION_TOOLSET, "d", DELEGATE_TASK_SCHEMA["parameters"], lambda a, c: "ok")
    return AIAgent(model="m", base_url="http://127.0.0.1:9/v1", api_key="", toolsets=ALL, workspace=tmp_path,
                   tool_settings=tool_settings_of(cfg, home), provided_toolsets={DELEGATION_TOOLSET: lambda: [delegation]})


def child_of(agent: AIAgent, role: str = "leaf", llm: ScriptedLLM | None = None) -> AIAgent:
    child = agent.build_child(task_index=0, goal="Summarise the notes", context=None, toolsets=None, role=role)
    child._llm = llm
    return child


def names(agent: AIAgent) -> list[str]:
    return [tool.name for tool in agent.tools]


def test_the_catalogue_is_the_tools_the_modules_define() -> None:
    for toolset, module in BUILTIN_TOOLSET_MODULES.items():
        assert TOOLS_BY_TOOLSET[toolset] == tuple(t.name for t in importlib.import_module(module).TOOLS)
    assert TOOLS_BY_TOOLSET[DELEGATION_TOOLSET] == (DELEGATE_TASK_SCHEMA["name"],)
    assert "delegate_task" not in DEFAULT_LEAF_TOOLS and DEFAULT_ORCHESTRATOR_TOOLS[-1] == "delegate_task"


@pytest.mark.parametrize("tools,role,needle", [
    (["read_file", "ask_user"], "leaf", "unknown tool 'ask_user'; a subagent's tools are chosen from: read_file"),
    (["delegate_task"], "leaf", "delegate_task is for orchestrators"),
    ("read_file", "leaf", "must be a list"),
])
def test_a_bad_list_is_refused(tools: Any, role: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        validate_tool_list(tools, role)


def test_the_lists_are_config_keys_validated_like_the_others() -> None:
    with pytest.raises(ConfigError, match="delegation.leaf_tools.*unknown tool 'send_message'"):
        set_value("delegation.leaf_tools", "[read_file, send_message]")
    assert set_value("delegation.leaf_tools", "[read_file, list_files]")[0] == ["read_file", "list_files"]


def test_a_leaf_gets_its_list_and_never_delegate_task(tmp_path: Path) -> None:
    agent = parent(tmp_path, max_spawn_depth=3, leaf_tools=["read_file", "list_files", "fetch_url"])
    leaf = child_of(agent)
    assert names(leaf) == ["read_file", "list_files", "fetch_url"] and leaf._delegate_role == "leaf"
    assert "Your tools (role leaf): read_file, list_files, fetch_url." in leaf.system_prompt
    assert "cannot ask the user" in leaf.system_prompt


def test_an_orchestrator_delegates_only_within_the_depth_limit(tmp_path: Path) -> None:
    agent = parent(tmp_path, max_spawn_depth=2)
    orchestrator = child_of(agent, role="orchestrator")
    assert sorted(names(orchestrator)) == sorted(DEFAULT_ORCHESTRATOR_TOOLS)
    assert orchestrator._delegate_role == "orchestrator"
    assert "delegate_task" in orchestrator.system_prompt
    grandchild = child_of(orchestrator, role="orchestrator")  # depth 2 = the limit
    assert "delegate_task" not in names(grandchild) and grandchild._delegate_role == "leaf"
    assert sorted(names(child_of(parent(tmp_path, max_spawn_depth=1), role="orchestrator"))) == sorted(DEFAULT_LEAF_TOOLS)


def test_a_call_to_a_blocked_tool_is_a_clear_tool_error(tmp_path: Path) -> None:
    llm = ScriptedLLM(tool_call("run_command", {"command": "ls"}), tool_call("ask_user", {"q": "?"}),
                      AssistantTurn("done", [], "stop"))
    leaf = child_of(parent(tmp_path, leaf_tools=["read_file"]), llm=llm)
    result = leaf.run_conversation("go")
    outputs = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert outputs[0].startswith("Error: 'run_command' is not available to a subagent (role leaf).")
    assert outputs[1].startswith("Error: unknown tool 'ask_user' for a subagent (role leaf).")
    assert all("A subagent may use only: read_file" in o and "delegation.leaf_tools" in o for o in outputs)
    assert [t["function"]["name"] for t in llm.requests[0][1]] == ["read_file"]  # only its tools are offered


def test_a_top_level_agent_keeps_every_tool(tmp_path: Path) -> None:
    agent = parent(tmp_path, leaf_tools=["read_file"])
    assert "run_command" in names(agent) and "delegate_task" in names(agent)


# -- offload's home ----------------------------------------------------------------------------
@pytest.fixture
def home_in_workspace(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / ".hermes"
    (home / "logs").mkdir(parents=True)
    (home / "config.yaml").write_text("model: secret-model\n")
    (home / "logs" / "offload.log").write_text("secret-model was here\n")
    (tmp_path / "notes.txt").write_text("the secret-model notes\n")
    return tmp_path, home


def run_tool(agent: AIAgent, name: str, args: dict[str, Any]) -> str:
    agent._llm = ScriptedLLM(tool_call(name, args), AssistantTurn("done", [], "stop"))
    return [m["content"] for m in agent.run_conversation("go")["messages"] if m["role"] == "tool"][0]


@pytest.mark.parametrize("name,args", [
    ("read_file", {"path": ".hermes/config.yaml"}),
    ("read_file", {"path": "notes/../.hermes/logs/offload.log"}),
    ("write_file", {"path": ".hermes/config.yaml", "content": "model: evil\n"}),
    ("list_files", {"path": ".hermes"}),
    ("run_command", {"command": "cat .hermes/config.yaml"}),
    ("run_command", {"command": "cat \"$HERMES_HOME/config.yaml\""}),
    ("run_command", {"command": "ls", "cwd": ".hermes/logs"}),
])
def test_a_child_cannot_reach_offloads_home(home_in_workspace: tuple[Path, Path], name: str,
                                            args: dict[str, Any]) -> None:
    workspace, home = home_in_workspace
    out = run_tool(child_of(parent(workspace, home)), name, args)
    assert out.startswith(f"Error: {name}: '") and f"is in offload's own home {home}" in out, out
    assert (home / "config.yaml").read_text() == "model: secret-model\n"


def test_searches_and_listings_of_the_workspace_leave_the_home_out(home_in_workspace: tuple[Path, Path]) -> None:
    workspace, home = home_in_workspace
    leaf = child_of(parent(workspace, home))
    found = run_tool(leaf, "search_files", {"pattern": "secret-model"})
    assert "notes.txt" in found and ".hermes" not in found
    listing = run_tool(leaf, "list_files", {})
    assert ".hermes/ (offload's home: not shown to a subagent)" in listing and "config.yaml" not in listing
    assert "hermes" not in run_tool(leaf, "run_command", {"command": "env"}).replace(".hermes", "")


def test_no_agent_works_in_the_home_itself(home_in_workspace: tuple[Path, Path]) -> None:
    """The parent's file tools read a workspace that contains the home; a workspace that IS the
    home (or lies inside it) is refused for the parent and a child alike (issue 40, point 3)."""
    workspace, home = home_in_workspace
    assert "secret-model" in run_tool(parent(workspace, home), "read_file", {"path": ".hermes/config.yaml"})
    for agent in (parent(home, home), child_of(parent(home, home))):
        out = run_tool(agent, "read_file", {"path": "config.yaml"})
        assert "secret-model" not in out and "offload's own home" in out and "another folder" in out, out


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_nothing_a_childs_command_starts_outlives_it(tmp_path: Path, sandbox: str) -> None:
    """Unsandboxed, offload stops what is left in the command's group (and says so); in the
    sandbox the PID namespace ends with the shell. Either way, nothing is left."""
    leaf = child_of(parent(tmp_path))
    leaf.tool_settings["terminal"] = {"sandbox": sandbox}
    marker = _sleep_marker()
    out = run_tool(leaf, "run_command", {"command": f"sleep {marker} > /dev/null 2>&1 &"})
    assert out.startswith("exit code: 0"), out
    assert sandbox == "auto" or "background processes started by the command were stopped" in out, out
    assert not _marked_alive(marker)
