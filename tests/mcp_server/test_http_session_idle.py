"""``offload mcp --http`` ends an idle HTTP session (issue 43, item 5): the app ``http_app``
builds, served in-process by uvicorn with an idle time of ``IDLE_S`` instead of 3900 s, driven by
raw HTTP with the home's token. A session with no request in flight past the idle time is
dropped (its id answers 404, as a client meets an expired session, and it starts a new one); a
session whose ``delegation_result`` wait is in flight for several idle times is not, and serves
its next call; neither costs a namespace (a new session lists the same delegation). The SDK
counts idle time from the end of a session's last request, so the test waits a few idle times
(~3 s in all)."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import uvicorn

from offload.config import OffloadConfig
from offload.mcp_server.delegations import McpDelegations
from offload.mcp_server.http import MCP_PATH, SESSION_HEADER, http_app, token_verifier
from offload.mcp_server.server import Tools, build_server
from offload.runtime import Offload
from offload.access.tokens import TokenStore
from tests.mcp_server.mcp_support import HOLD, GatedModel

pytestmark = pytest.mark.timeout(60)
IDLE_S = 0.6
WAIT_S = 4 * IDLE_S  # the busy session's wait: several idle times in flight


class RawSession:
    """One MCP session over plain HTTP: ``initialize`` opens it, ``post`` sends a request on it."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.id = url, None
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        self.serial = 0
        opened = self.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "idle-test", "version": "1"}})
        assert opened.status_code == 200, opened.text
        self.id = opened.headers[SESSION_HEADER]
        done = httpx.post(url, headers={**self.headers, SESSION_HEADER: self.id},
                          json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=10)
        assert done.status_code == 202, done.text

    def post(self, method: str, params: dict[str, Any]) -> httpx.Response:
        self.serial += 1
        headers = {**self.headers, **({SESSION_HEADER: self.id} if self.id else {})}
        return httpx.post(self.url, headers=headers, timeout=30,
                          json={"jsonrpc": "2.0", "id": self.serial, "method": method, "params": params})

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The tool's structured result; fails the test on an HTTP or tool error."""
        answer = self.post("tools/call", {"name": tool, "arguments": arguments})
        assert answer.status_code == 200, answer.text
        message = _message(answer)
        assert not message["result"].get("isError"), message
        return message["result"]["structuredContent"]


def _message(answer: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a JSON body or an SSE stream's data lines."""
    if answer.headers["content-type"].startswith("application/json"):
        return answer.json()
    data = [line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return json.loads(data[-1])


@pytest.fixture
def served(tmp_path: Path, model: GatedModel) -> Iterator[tuple[str, str, GatedModel]]:
    """``http_app`` with a short idle time under uvicorn in a thread; (url, token, model)."""
    workspace = tmp_path / "work"
    workspace.mkdir()
    cfg = OffloadConfig(base_url=model.server.url, model="demo-model", workspace=str(workspace))
    with Offload(cfg, home=tmp_path) as off:
        service = McpDelegations(off, lambda root: off.build_agent("mcp-server"))
        app = http_app(build_server(Tools(service)), "127.0.0.1", token_verifier(tmp_path), session_idle_s=IDLE_S)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 20
            while not server.started:
                assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
                time.sleep(0.02)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}{MCP_PATH}", TokenStore(tmp_path).get(), model
        finally:
            model.gate.set()
            service.close()
            server.should_exit = True
            thread.join(20)
            sock.close()


def test_an_idle_session_is_dropped_and_a_waiting_one_is_kept(served):
    url, token, model = served
    idle, waiting = RawSession(url, token), RawSession(url, token)
    handle = waiting.call("delegate_task", goal=f"{HOLD} until the test opens the gate")
    delegation_id = handle["delegation_id"]

    started = time.monotonic()
    waited = waiting.call("delegation_result", delegation_id=delegation_id, wait_s=WAIT_S)
    assert waited["state"] == "running" and time.monotonic() - started >= WAIT_S - 0.1, waited  # in flight 4 idle times

    dropped = idle.post("ping", {})
    assert dropped.status_code == 404, dropped.text  # idle past IDLE_S: the SDK ended it
    kept = waiting.post("ping", {})
    assert kept.status_code == 200, kept.text  # its idle time started when its wait ended
    model.gate.set()
    fresh = RawSession(url, token)  # the dropped client starts again and loses nothing
    listed = fresh.call("list_delegations")
    assert [d["delegation_id"] for d in listed["delegations"]] == [delegation_id]
