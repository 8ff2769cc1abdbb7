"""MCP Tasks (SEP-2663) with a client that opts in through the SDK's client extension API:
delegate_task becomes a task whose id is the delegation id, tasks/get polls it to the result,
tasks/cancel stops it, the ledger is the task store (a task outlives a SIGKILLed server), and a
client that did not opt in still gets the plain tool result."""
from __future__ import annotations

import json
import os
import signal

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ListRootsResult, Root
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY

from offload.mcp_server.tasks_client import CreateTaskResult, TasksClient, cancel_task, get_task, poll
from tests.mcp_server.mcp_support import HOLD, call, mcp_client

pytestmark = pytest.mark.timeout(120)


def test_an_opted_in_client_gets_a_task_and_call_tool_resolves_it_to_the_result(tmp_path, model):
    states: list[dict] = []
    home, project = tmp_path / "home", tmp_path / "project"  # a root inside offload's home is refused
    home.mkdir()
    project.mkdir()

    async def list_roots(context):
        return ListRootsResult(roots=[Root(uri=project.as_uri())])

    async def on_task(state: dict) -> None:
        states.append(state)

    async def body():
        async with mcp_client(home, model=model, extensions=[TasksClient(on_task)],
                              list_roots_callback=list_roots) as client:
            result = await client.call_tool("delegate_task", {"goal": "look around"})
            assert isinstance(result, CallToolResult) and not result.is_error
            assert result.structured_content["state"] == "completed" and "finished:" in result.content[0].text
            task_id = states[0]["taskId"]
            assert states[0]["resultType"] == "task" and states[0]["status"] == "working"
            assert states[0]["pollIntervalMs"] == 1000  # the extension's name, as its clients read it
            assert task_id.startswith("deleg_") and states[-1]["status"] == "completed"
            assert states[-1]["result"]["resultType"] == "complete"  # what the official ext-tasks client reads
            listed = (await call(client, "list_delegations")).structured_content["delegations"]
            assert [(d["delegation_id"], d["delivered"]) for d in listed] == [(task_id, True)]
            assert any(str(project) in json.dumps(r) for r in model.server.requests)  # children work in the root
        async with mcp_client(home, model=model) as plain:  # no extension: the ordinary handle
            handle = (await call(plain, "delegate_task", goal="plain call")).structured_content
            assert handle["status"] == "dispatched"
    anyio.run(body)


def test_tasks_cancel_stops_it_and_unknown_or_foreign_ids_are_no_task(tmp_path, model):
    async def body():
        async with mcp_client(tmp_path, model=model, name="alpha", extensions=[TasksClient()]) as client:
            created = await client.session.call_tool("delegate_task", {"goal": f"{HOLD} forever"}, allow_claimed=True)
            assert isinstance(created, CreateTaskResult)
            working = await get_task(client.session, created.task_id)
            assert working.status == "working" and working.model_extra["ttlMs"] is None  # required, null: unlimited
            await cancel_task(client.session, created.task_id)
            await cancel_task(client.session, "deleg_unknown")  # acknowledged all the same
            with anyio.fail_after(60):
                result = await poll(client.session, created.task_id)
            assert result.is_error and f"task {created.task_id} cancelled" in result.content[0].text
            assert (await get_task(client.session, created.task_id)).status == "cancelled"  # for good
            partial = (await call(client, "delegation_result", delegation_id=created.task_id)).structured_content
            assert partial["state"] == "interrupted"
            with pytest.raises(Exception, match="no such task"):
                await get_task(client.session, "deleg_unknown")
        async with mcp_client(tmp_path, model=model, name="beta", extensions=[TasksClient()]) as other:
            with pytest.raises(Exception, match="no such task"):
                await get_task(other.session, created.task_id)
    anyio.run(body)


def test_a_task_outlives_a_killed_server(tmp_path, model):
    (tmp_path / "config.yaml").write_text("delegation: {resume: auto}\n")

    async def body():
        async with mcp_client(tmp_path, model=model, extensions=[TasksClient()], tolerate_exit=True) as first:
            created = await first.session.call_tool("delegate_task", {"goal": f"{HOLD} long"}, allow_claimed=True)
            status = (await call(first, "delegation_status", delegation_id=created.task_id)).structured_content
            os.kill(status["owner_pid"], signal.SIGKILL)
        model.gate.set()
        async with mcp_client(tmp_path, model=model, extensions=[TasksClient()]) as second:
            result = await poll(second.session, created.task_id)  # the new server resumes it
            assert result.structured_content["state"] == "completed" and not result.is_error, result
            assert "finished: HOLD long" in result.content[0].text
    anyio.run(body)


def test_tasks_get_refuses_a_client_that_did_not_declare_the_extension_and_reads_nothing(tmp_path, model):
    async def body():
        async with mcp_client(tmp_path, model=model, name="alpha") as plain:
            handle = (await call(plain, "delegate_task", goal="quick one")).structured_content
            await call(plain, "delegation_status", delegation_id=handle["delegation_id"])
            with pytest.raises(MCPError) as refused:
                await get_task(plain.session, handle["delegation_id"])
            assert refused.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
            assert "declare 'io.modelcontextprotocol/tasks'" in refused.value.error.message
            listed = (await call(plain, "list_delegations")).structured_content["delegations"]
            assert listed[0]["delivered"] is False  # the refused poll acknowledged nothing
    anyio.run(body)
