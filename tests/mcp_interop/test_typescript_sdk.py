"""``offload mcp`` against the TypeScript SDK's client (``@modelcontextprotocol/sdk`` 1.32.2, protocol
2025-11-25), over stdio and Streamable HTTP, with and without the 2025-11-25 tasks
(``params.task``: CreateTaskResult, tasks/get, tasks/result, tasks/list) -- an implementation
nobody here wrote (issue 43's "done when")."""
from __future__ import annotations

import pytest

from tests.mcp_interop.node_clients import run_client
from tests.mcp_server.mcp_support import OFFLOAD, HttpServer, server_env

pytestmark = pytest.mark.timeout(240)
TOOLS = ["delegate_task", "delegation_result", "delegation_status", "list_delegations", "stop_delegation"]


@pytest.mark.parametrize("tasks", [False, True], ids=["plain", "tasks"])
def test_stdio(tmp_path, model, tasks):
    env = server_env(tmp_path, model)
    report = run_client("sdk_client.mjs", "--stdio", OFFLOAD, "mcp", "--workspace", str(tmp_path),
                        *(["--tasks"] if tasks else []), env=env)
    assert report["protocol"] == "2025-11-25" and report["tools"] == TOOLS


@pytest.mark.parametrize("tasks", [False, True], ids=["plain", "tasks"])
def test_http(tmp_path, model, tasks):
    server = HttpServer(tmp_path, "--workspace", str(tmp_path), model=model)  # the home's token store
    try:
        report = run_client("sdk_client.mjs", "--http", server.url, "--token", server.token,
                            *(["--tasks"] if tasks else []))
    finally:
        server.stop()
    assert report["protocol"] == "2025-11-25" and report["tools"] == TOOLS
    if tasks:
        assert report["task_messages"][0] == "taskCreated" and report["task_messages"][-1] == "result"
