"""``offload mcp`` over stdio, driven by the SDK's own client: the five tools, dispatch at once,
results collected and acknowledged, progress during a wait, bad input as tool errors, and
namespaces that keep unrelated clients apart."""
from __future__ import annotations

import json
import subprocess
import threading
import time

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import ListRootsResult, Root
from mcp_types.jsonrpc import METHOD_NOT_FOUND

from tests.mcp_server.mcp_support import (GATE_TIMEOUT_S, HOLD, OFFLOAD, GatedModel, call, mcp_client, server_env,
                                          tool_error)

pytestmark = pytest.mark.timeout(120)
TOOLS = {"delegate_task", "delegation_status", "delegation_result", "list_delegations", "stop_delegation"}


def test_demo_model_dispatches_at_once_and_the_result_arrives_acknowledged(tmp_path):
    async def body():
        async with mcp_client(tmp_path, "--demo-model") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            assert set(tools["delegate_task"].input_schema["properties"]) == {"goal", "tasks", "context", "toolsets"}
            started = time.monotonic()
            handle = (await call(client, "delegate_task", goal="count the files in the workspace")).structured_content
            assert time.monotonic() - started < 1.0
            assert handle["status"] == "dispatched" and "delegation_result" in handle["note"]
            delegation_id = handle["delegation_id"]
            status = (await call(client, "delegation_status", delegation_id=delegation_id[:10])).structured_content
            assert status["delegation_id"] == delegation_id and status["state"] in {"running", "completed"}
            assert status["children_total"] == 1
            result = await call(client, "delegation_result", delegation_id=delegation_id, wait_s=60)
            assert result.structured_content["state"] == "completed"
            assert result.structured_content["schema"] == "offload.result/1"  # the result document, MCP keys beside
            assert result.structured_content["text"] == result.content[0].text
            assert result.structured_content["children"][0]["state"] == "completed"
            assert delegation_id in result.content[0].text and "count the files" in result.content[0].text
            listed = (await call(client, "list_delegations")).structured_content["delegations"]
            assert [(d["delegation_id"], d["delivered"]) for d in listed] == [(delegation_id, True)]
    anyio.run(body)


def test_a_long_wait_reports_children_done_as_progress(tmp_path, model):
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress, total, message):
        seen.append((progress, total))
        if progress == 2:  # started (1), and the quick child is in (2): let the held one finish
            model.gate.set()

    async def body():
        async with mcp_client(tmp_path, model=model) as client:
            handle = (await call(client, "delegate_task", tasks=[{"goal": "quick look"},
                                                                  {"goal": f"{HOLD} slow look"}])).structured_content
            result = await client.call_tool("delegation_result", {"delegation_id": handle["delegation_id"], "wait_s": 60},
                                            progress_callback=on_progress)
            assert not result.is_error and result.structured_content["state"] == "completed"
            assert result.structured_content["children_done"] == 2
    anyio.run(body)
    assert (2, 3) in seen and all(total == 3 for _, total in seen)  # steps: started, then each of 2 children
    assert seen[-1] == (3, 3)  # the last notification reaches the total as the delegation finishes


class SecondGate(GatedModel):
    """Also holds goals saying SECOND, until ``second`` opens."""

    def __init__(self) -> None:
        self.second = threading.Event()
        super().__init__()

    def script(self, request):
        if "SECOND" in " ".join(str(m.get("content")) for m in request.get("messages") or []):
            self.second.wait(GATE_TIMEOUT_S)
        return super().script(request)


def test_a_queued_delegation_reports_queued_progress_then_running_progress(tmp_path):
    """At capacity the second delegation is queued: a wait on it says so, then says it runs
    once the slot frees and it starts (issue 29 items 3 and 4 over MCP)."""
    (tmp_path / "config.yaml").write_text("delegation:\n  max_concurrent_children: 1\n", encoding="utf-8")
    model = SecondGate()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))
        if message.startswith("queued"):
            model.gate.set()  # the first delegation finishes and frees the slot
        elif message.startswith("running"):
            model.second.set()

    async def body():
        async with mcp_client(tmp_path, model=model) as client:
            await call(client, "delegate_task", goal=f"{HOLD} hold the only slot")
            handle = (await call(client, "delegate_task", goal="SECOND wait for the slot")).structured_content
            assert handle["state"] == "queued", handle
            status = (await call(client, "delegation_status", delegation_id=handle["delegation_id"])).structured_content
            assert (status["state"], status["children_done"], status["children_total"]) == ("queued", 0, 1)
            result = await client.call_tool("delegation_result", {"delegation_id": handle["delegation_id"], "wait_s": 60},
                                            progress_callback=on_progress)
            assert result.structured_content["state"] == "completed", result.structured_content
    try:
        with model.server:
            anyio.run(body)
    finally:
        model.gate.set()
        model.second.set()
    assert seen[0] == (0, 2, "queued: every background slot is busy; it starts by itself when one frees"), seen
    assert (1, 2, "running: 0/1 subagents done") in seen, seen


def test_a_short_wait_returns_the_state_and_stop_delivers_the_partial_result(tmp_path, model):
    async def body():
        async with mcp_client(tmp_path, model=model) as client:
            handle = (await call(client, "delegate_task", goal=f"{HOLD} a long job")).structured_content
            waited = await call(client, "delegation_result", delegation_id=handle["delegation_id"], wait_s=0)
            assert waited.structured_content["state"] == "running" and waited.structured_content["text"] is None
            assert "call delegation_result again" in waited.content[0].text
            stopped = (await call(client, "stop_delegation", delegation_id=handle["delegation_id"])).structured_content
            assert stopped["stopped"] is True
            result = await call(client, "delegation_result", delegation_id=handle["delegation_id"], wait_s=60)
            assert result.structured_content["state"] == "interrupted"
            assert "interrupted" in result.content[0].text, result.content[0].text
            again = (await call(client, "stop_delegation", delegation_id=handle["delegation_id"])).structured_content
            assert again["stopped"] is False and "not running" in again["note"]
    anyio.run(body)


def test_bad_input_is_a_tool_error_naming_the_fix_and_the_server_keeps_serving(tmp_path, model):
    async def body():
        async with mcp_client(tmp_path, model=model) as client:
            assert "list_delegations" in await tool_error(client, "delegation_result", delegation_id="deleg_nope")
            assert "goal" in await tool_error(client, "delegate_task")
            assert "placeholder" in (await tool_error(client, "delegate_task", goal="TODO")).lower()
            assert "delegation_id is required" in await tool_error(client, "delegation_status", delegation_id=" ")
            assert await tool_error(client, "delegation_result", delegation_id="x", wait_s=-1) == (
                "delegation_result: wait_s: -1 is less than the minimum of 0")
            refused = await tool_error(client, "delegate_task", goal="look", contxt="lost context")
            assert refused == ("delegate_task has no argument 'contxt'; its arguments are context, goal, tasks, "
                               "toolsets (check the spelling)")
            wrong = await tool_error(client, "delegation_result", delegation_id="x", wait_s="soon")
            assert wrong.startswith("delegation_result: wait_s: 'soon' is not of type") and "pydantic" not in wrong
            assert "tasks.0" in await tool_error(client, "delegate_task", tasks=[{"goal": "a", "gaol": "b"}])
            long_goal = "explore " + "x" * 200_000
            handle = (await call(client, "delegate_task", goal=long_goal)).structured_content
            assert handle["status"] == "dispatched" and len(json.dumps(handle)) < 5_000
            status = (await call(client, "delegation_status", delegation_id=handle["delegation_id"])).structured_content
            listed = (await call(client, "list_delegations")).structured_content
            assert len(json.dumps(status)) < 5_000 and len(json.dumps(listed)) < 5_000
            assert "more characters]" in status["label"]
    anyio.run(body)


def test_the_tools_describe_themselves_to_a_client_s_model(tmp_path):
    async def body():
        async with mcp_client(tmp_path) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for tool in tools.values():
                assert tool.title and tool.description and "``" not in tool.description and tool.output_schema
                for name, prop in tool.input_schema["properties"].items():
                    assert prop.get("description"), (tool.name, name)
            delegate = tools["delegate_task"].input_schema
            assert set(delegate["properties"]) == {"goal", "tasks", "context", "toolsets"}  # no background, no role
            assert "end your turn" not in json.dumps(delegate)
            wait = tools["delegation_result"].input_schema["properties"]["wait_s"]
            assert (wait["minimum"], wait["maximum"]) == (0, 3600)
            assert "goal" in json.dumps(delegate["$defs"])  # the shape of a task
            assert all(tools[n].annotations.read_only_hint for n in ("delegation_status", "delegation_result",
                                                                     "list_delegations"))
            assert tools["stop_delegation"].annotations.destructive_hint
            assert client.server_capabilities.prompts is None and client.server_capabilities.resources is None
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("anything")
            assert missing.value.error.code == METHOD_NOT_FOUND
    anyio.run(body)


def test_namespaces_keep_clients_apart_and_a_restarted_client_finds_its_own(tmp_path, model):
    async def body():
        async with mcp_client(tmp_path, model=model, name="alpha") as alpha:
            delegation_id = (await call(alpha, "delegate_task", goal="alpha's job")).structured_content["delegation_id"]
            await call(alpha, "delegation_result", delegation_id=delegation_id, wait_s=60)
        async with mcp_client(tmp_path, model=model, name="beta") as beta:
            assert (await call(beta, "list_delegations")).structured_content["delegations"] == []
            assert "no delegation" in await tool_error(beta, "delegation_status", delegation_id=delegation_id)
            assert "no delegation" in await tool_error(beta, "stop_delegation", delegation_id=delegation_id[:10])
        async with mcp_client(tmp_path, "--namespace", "shared", model=model, name="beta") as named:
            assert (await call(named, "list_delegations")).structured_content["delegations"] == []
        async with mcp_client(tmp_path, model=model, name="alpha") as alpha_again:
            listed = (await call(alpha_again, "list_delegations")).structured_content["delegations"]
            assert [d["delegation_id"] for d in listed] == [delegation_id]
        async with mcp_client(tmp_path, "--all-namespaces", model=model, name="operator") as operator:
            listed = (await call(operator, "list_delegations")).structured_content["delegations"]
            assert [d["delegation_id"] for d in listed] == [delegation_id]
            assert "only reads and stops" in await tool_error(operator, "delegate_task", goal="from the operator")
    anyio.run(body)


def test_children_work_in_the_client_s_first_root_unless_workspace_is_given(tmp_path, model):
    home, project, fixed = tmp_path / "home", tmp_path / "project", tmp_path / "fixed"
    for path in (home, project, fixed):
        path.mkdir()
    roots = [project]

    async def list_roots(context):
        return ListRootsResult(roots=[Root(uri=root.as_uri()) for root in roots])

    def prompts_of(goal: str) -> str:
        return "\n".join(json.dumps(r) for r in model.server.requests if goal in json.dumps(r))

    async def body():
        async with mcp_client(home, model=model, list_roots_callback=list_roots) as client:
            handle = (await call(client, "delegate_task", goal="in the root")).structured_content
            await call(client, "delegation_result", delegation_id=handle["delegation_id"], wait_s=60)
            for inside in (home, home / "logs"):  # the root changes: checked on each call
                inside.mkdir(exist_ok=True)
                roots[0] = inside
                refused = await tool_error(client, "delegate_task", goal="in offload's home")
                assert "offload's own home" in refused and "--workspace DIR" in refused, refused
        async with mcp_client(home, "--workspace", str(fixed), model=model, list_roots_callback=list_roots) as client:
            handle = (await call(client, "delegate_task", goal="in the fixed one")).structured_content
            await call(client, "delegation_result", delegation_id=handle["delegation_id"], wait_s=60)
    anyio.run(body)
    assert str(project) in prompts_of("in the root") and str(fixed) not in prompts_of("in the root")
    assert str(fixed) in prompts_of("in the fixed one") and str(project) not in prompts_of("in the fixed one")


def test_stdout_carries_nothing_but_protocol(tmp_path):
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    done = subprocess.run([OFFLOAD, "mcp", "--demo-model", "--verbose"], input=json.dumps(request) + "\n",
                          env=server_env(tmp_path, None), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines and all(json.loads(line)["jsonrpc"] == "2.0" for line in lines), done.stdout
    assert json.loads(lines[0])["result"]["serverInfo"]["name"] == "offload"
    assert "demo model" in done.stderr  # the label goes to stderr
