"""``offload mcp`` against the official ``@modelcontextprotocol/client`` 2.4.0 pinned to protocol
2026-07-28 with ``@modelcontextprotocol/ext-tasks`` 0.2.2, over stdio and Streamable HTTP: a
delegation runs as a task of the tasks extension and settles ``completed`` with its result
inline (``resultType: "complete"``), and a cancelled one settles ``cancelled`` (issue 43
point 2, checked by a client nobody here wrote)."""
from __future__ import annotations

import pytest

from tests.mcp_interop.node_clients import run_client
from tests.mcp_server.mcp_support import OFFLOAD, HttpServer, server_env

pytestmark = pytest.mark.timeout(240)


def _assert_report(report: dict) -> None:
    assert (report["protocol"], report["era"]) == ("2026-07-28", "modern")
    assert (report["completed"], report["cancelled"]) == ("completed", "cancelled")


def test_stdio(tmp_path, model):
    _assert_report(run_client("ext_tasks_client.mjs", "--stdio", OFFLOAD, "mcp", "--workspace", str(tmp_path),
                              env=server_env(tmp_path, model)))


def test_http(tmp_path, model):
    server = HttpServer(tmp_path, "--workspace", str(tmp_path), model=model)  # the home's token store
    try:
        _assert_report(run_client("ext_tasks_client.mjs", "--http", server.url, "--token", server.token))
    finally:
        model.gate.set()  # the cancelled HOLD delegation's child may still wait on the model
        server.stop()
