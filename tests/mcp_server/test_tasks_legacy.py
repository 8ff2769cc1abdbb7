"""2025-11-25 clients over raw Streamable HTTP (issue 43 point 1): one that declares the 2026
tasks extension anyway gets the plain handle, not -32603; one that sends ``params.task`` gets a
``CreateTaskResult`` and reads it with tasks/get, tasks/result, tasks/list; a refused call
(nothing dispatched) stays a tool error and leaves no delegation behind; tasks/cancel of a
finished task is refused."""
from __future__ import annotations

import anyio
import httpx
import pytest

from bench.probes.mcp_waits import PROTOCOL, Session
from tests.mcp_server.mcp_support import HttpServer

pytestmark = pytest.mark.timeout(120)
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


async def _session(http: httpx.AsyncClient, server: HttpServer, capabilities: dict) -> Session:
    url = server.url
    session = Session(http, url, server.token)
    reply = await session.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": capabilities,
                                                 "clientInfo": {"name": "legacy", "version": "1"}})
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session.headers)
    session.capabilities = reply["result"]["capabilities"]
    return session


def test_2025_11_25_clients_get_a_plain_handle_or_a_core_task(tmp_path, model):
    server = HttpServer(tmp_path, "--workspace", str(tmp_path), model=model)

    async def body():
        async with httpx.AsyncClient(timeout=60) as http:
            declaring = await _session(http, server, {"extensions": {TASKS_EXTENSION: {}}})
            plain = (await declaring.request("tools/call", {"name": "delegate_task",
                                                            "arguments": {"goal": "plain one"}}))["result"]
            assert plain["structuredContent"]["status"] == "dispatched" and not plain.get("isError")

            tasks = await _session(http, server, {})
            assert tasks.capabilities["tasks"]["requests"]["tools"]["call"] == {}
            listed = (await tasks.request("tools/list", {}))["result"]["tools"]
            assert next(t for t in listed if t["name"] == "delegate_task")["execution"] == {"taskSupport": "optional"}
            refused = (await tasks.request("tools/call", {"name": "delegate_task", "arguments": {"goal": "TODO"},
                                                          "task": {}}))["result"]
            assert refused["isError"] and "placeholder" in refused["content"][0]["text"].lower()
            created = (await tasks.request("tools/call", {"name": "delegate_task", "arguments": {"goal": "a task"},
                                                          "task": {"ttl": 60000}}))["result"]["task"]
            task_id = created["taskId"]
            assert created["status"] == "working" and task_id.startswith("deleg_") and "ttl" in created
            result = (await tasks.request("tasks/result", {"taskId": task_id}))["result"]
            assert result["structuredContent"]["state"] == "completed"
            assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
            state = (await tasks.request("tasks/get", {"taskId": task_id}))["result"]
            assert state["status"] == "completed" and state["pollInterval"] == 1000
            every = (await tasks.request("tasks/list", {}))["result"]["tasks"]
            assert [t["taskId"] for t in every] == [task_id, plain["structuredContent"]["delegation_id"]]
            cancel = await tasks.request("tasks/cancel", {"taskId": task_id})
            assert cancel["error"]["code"] == -32602 and "already finished" in cancel["error"]["message"]
    try:
        anyio.run(body)
    finally:
        server.stop()
