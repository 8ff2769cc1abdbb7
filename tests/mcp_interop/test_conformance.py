"""The official conformance suite (``@modelcontextprotocol/conformance`` 0.1.16) against
``offload mcp --http``, for the scenarios of what offload claims: the initialize handshake, ping,
tools/list, several concurrent SSE streams and the DNS-rebinding protection. Scenarios for
features offload does not offer (resources, prompts, sampling, logging, completion) are not run.

The suite has no option for an ``Authorization`` header and offload's server requires a token on
loopback too, so it talks to the server through ``BearerProxy``, which adds the home's token and
passes everything else (Host, Origin, bodies, SSE streams) byte for byte."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from tests.mcp_interop.bearer_proxy import BearerProxy
from tests.mcp_interop.node_clients import run_node
from tests.mcp_server.mcp_support import HttpServer

pytestmark = pytest.mark.timeout(240)
CONFORMANCE = "node_modules/@modelcontextprotocol/conformance/dist/index.js"
SCENARIOS = ["server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("conformance")
    running = HttpServer(home, "--workspace", str(home))
    address = urlsplit(running.url)
    try:
        with BearerProxy(address.port, running.token) as proxy:
            yield proxy.url_for(address.path)
    finally:
        running.stop()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_passes(server, scenario, tmp_path):
    proc = run_node(CONFORMANCE, "server", "--url", server, "--scenario", scenario, "-o", str(tmp_path))
    summary = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", proc.stdout)
    assert proc.returncode == 0 and summary, f"{scenario}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-2000:]}"
    passed, total, failed = map(int, summary.groups())
    assert failed == 0 and passed == total > 0, proc.stdout
