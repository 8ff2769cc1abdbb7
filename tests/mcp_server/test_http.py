"""``offload mcp --http`` driven by the SDK's client over Streamable HTTP on 127.0.0.1: dispatch
at once and results, namespaces (one per token: test_namespaces), the bearer token (on loopback too, from the home's token store
by default; named client tokens; a short one refused; ``--token`` warns), the Host/Origin
checks against DNS rebinding, and a SIGKILL then restart."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import anyio
import httpx
import pytest

from offload.owner import home_worker
from offload.access.tokens import TokenStore
from tests.mcp_server.mcp_support import OFFLOAD, HOLD, HttpServer, call, http_client, server_env, tool_error

pytestmark = pytest.mark.timeout(120)
TOKEN = "a-long-enough-token-for-this-test-0123456789"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "1"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def server(tmp_path, model):
    TokenStore(tmp_path).rotate()  # the operator token, as `offload token rotate` makes it
    running = HttpServer(tmp_path, model=model)
    yield running
    running.stop()


def test_dispatch_returns_at_once_results_arrive_and_one_token_is_one_namespace(server, tmp_path):
    async def body():
        async with http_client(server.url, server.token, name="alpha") as alpha:
            started = time.monotonic()
            handle = (await call(alpha, "delegate_task", goal="look around")).structured_content
            assert time.monotonic() - started < 1.0 and handle["status"] == "dispatched"
            result = await call(alpha, "delegation_result", delegation_id=handle["delegation_id"], wait_s=60)
            assert result.structured_content["state"] == "completed" and "finished:" in result.content[0].text
            assert "no delegation" in await tool_error(alpha, "delegation_status", delegation_id="deleg_nope")
        async with http_client(server.url, server.token, name="beta") as beta:  # the token decides, not the name
            listed = (await call(beta, "list_delegations")).structured_content["delegations"]
            assert [d["delegation_id"] for d in listed] == [handle["delegation_id"]]
        async with http_client(server.url, TokenStore(tmp_path).add("beta"), name="alpha") as other:
            assert (await call(other, "list_delegations")).structured_content["delegations"] == []
            assert "no delegation" in await tool_error(other, "delegation_result", delegation_id=handle["delegation_id"])
    anyio.run(body)


def test_requests_without_the_token_or_for_a_foreign_name_are_refused(server):
    with httpx.Client(timeout=10) as raw:
        tokenless = raw.post(server.url, json=INITIALIZE, headers=HEADERS)
        assert tokenless.status_code == 401 and tokenless.headers["WWW-Authenticate"] == "Bearer"
        base = server.url.rsplit("/mcp", 1)[0]
        for discovery in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"):
            answer = raw.get(base + discovery)  # where an OAuth-minded client goes after the 401
            assert answer.status_code == 404 and "does not use OAuth" in answer.text
        wrong = raw.post(server.url, json=INITIALIZE, headers={**HEADERS, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        authorized = {**HEADERS, "Authorization": f"Bearer {server.token}"}
        rebound = raw.post(server.url, json=INITIALIZE, headers={**authorized, "Host": "evil.example:80"})
        assert rebound.status_code == 403 and "--allow-host" in rebound.text
        page = raw.post(server.url, json=INITIALIZE, headers={**authorized, "Origin": "http://evil.example"})
        assert page.status_code == 403
        other_port = raw.post(server.url, json=INITIALIZE, headers={**authorized, "Origin": "http://localhost:9999"})
        assert other_port.status_code == 403  # another service on this machine is another origin
        port = server.url.split(":")[2].split("/")[0]
        own = raw.post(server.url, json=INITIALIZE, headers={**authorized, "Origin": f"http://127.0.0.1:{port}"})
        assert own.status_code == 200, own.text


def test_a_named_client_token_works_until_it_is_removed(server, tmp_path):
    store = TokenStore(tmp_path)
    client_token = store.add("claude-code")
    with httpx.Client(timeout=10) as raw:
        def status() -> int:
            return raw.post(server.url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {client_token}"}
                            ).status_code
        assert status() == 200
        store.remove("claude-code")
        assert status() == 401


def test_a_short_token_is_refused_and_one_on_the_command_line_warns(tmp_path):
    def start(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([OFFLOAD, "mcp", "--http", "--host", "0.0.0.0", "--port", "0", *args],
                              env={**server_env(tmp_path, None), **env}, capture_output=True, text=True, timeout=60)
    short = start(OFFLOAD_MCP_TOKEN="s3cret")
    assert short.returncode == 2 and "$OFFLOAD_MCP_TOKEN is too short" in short.stderr and "32" in short.stderr
    assert "s3cret" not in short.stderr and short.stdout == ""
    flag = start("--token", "s3cret")
    assert flag.returncode == 2 and "--token is deprecated" in flag.stderr and "OFFLOAD_MCP_TOKEN" in flag.stderr


def test_the_deprecated_token_flag_still_serves_and_says_so(tmp_path, model):
    running = HttpServer(tmp_path, "--token", TOKEN, model=model)
    try:
        with httpx.Client(timeout=10) as raw:
            ok = raw.post(running.url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200
        assert "--token is deprecated" in running.banner
    finally:
        running.stop()


def test_a_killed_http_server_s_delegation_is_resumed_after_a_restart(tmp_path, model):
    (tmp_path / "config.yaml").write_text("delegation: {resume: auto}\n")
    first = HttpServer(tmp_path, "--token", TOKEN, model=model)

    async def dispatch() -> str:
        async with http_client(first.url, TOKEN) as client:
            handle = (await call(client, "delegate_task", goal=f"{HOLD} never finishes")).structured_content
            with anyio.fail_after(30):
                while not model.server.requests:  # the child is talking to its model
                    await anyio.sleep(0.05)
            return handle["delegation_id"]
    try:
        delegation_id = anyio.run(dispatch)
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(10)
    finally:
        first.stop()
    model.gate.set()
    second = HttpServer(tmp_path, "--token", TOKEN, model=model)

    async def collect() -> None:
        async with http_client(second.url, TOKEN) as client:
            result = await call(client, "delegation_result", delegation_id=delegation_id, wait_s=30)
            assert result.structured_content["state"] == "completed", result.structured_content
            assert "finished: HOLD never finishes" in result.structured_content["text"]
    try:
        anyio.run(collect)
    finally:
        second.stop()


def test_sigterm_ends_an_open_long_poll_at_once_with_its_current_state(tmp_path, model):
    running = HttpServer(tmp_path, "--token", TOKEN, model=model)
    outcome: dict = {}

    async def body():
        async with http_client(running.url, TOKEN) as client:
            handle = (await call(client, "delegate_task", goal=f"{HOLD} long")).structured_content

            async def wait() -> None:
                outcome["result"] = await client.call_tool("delegation_result",
                                                           {"delegation_id": handle["delegation_id"], "wait_s": 3600})
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await call(client, "delegation_status", delegation_id=handle["delegation_id"])
                running.proc.send_signal(signal.SIGTERM)
    try:
        anyio.run(body)
        assert running.proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it shut down
    finally:
        model.gate.set()
        running.stop()
        home_worker.kill(tmp_path)  # SIGTERM handed the child to the home's worker
    # Its state then, not a wait of 3600 s: still running here, or already handed over (queued for
    # the home's worker) when the hand-over's write came first.
    assert outcome["result"].structured_content["state"] in ("running", "queued"), outcome["result"]
