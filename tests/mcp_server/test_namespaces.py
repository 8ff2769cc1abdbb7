"""Namespaces bound to a credential (issue 43 point 7): over Streamable HTTP each named token of
the home's store is its own namespace whatever name its client reports, the operator token is
one namespace (``--namespace`` or ``token:operator``) and alone gets ``--all-namespaces``, a
revoked token's wait in flight is refused without acknowledging, and a session serves only the
token that opened it; over stdio ``--namespace`` (or the client's name and directory) still
decides, so a restarted client finds its delegations."""
from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from offload.mcp_server.tasks_client import CreateTaskResult, TasksClient, cancel_task, get_task
from offload.access.tokens import TokenStore
from tests.mcp_server.mcp_support import HOLD, HttpServer, call, http_client, mcp_client, tool_error

pytestmark = pytest.mark.timeout(120)


def _ids(result) -> list[str]:
    return [d["delegation_id"] for d in result.structured_content["delegations"]]


@pytest.fixture
def served(tmp_path, model):
    """An HTTP server on a home with two client tokens, ``a`` and ``b``."""
    store = TokenStore(tmp_path)
    tokens = {"a": store.add("a"), "b": store.add("b")}
    running = HttpServer(tmp_path, model=model)
    yield running, tokens
    running.stop()


def test_a_second_token_s_client_calling_itself_alpha_cannot_touch_alpha_s_delegations(served, model):
    server, tokens = served

    async def body():
        async with http_client(server.url, tokens["a"], name="alpha", extensions=[TasksClient()]) as alpha, \
                http_client(server.url, tokens["b"], name="alpha", extensions=[TasksClient()]) as impostor:
            held = await alpha.session.call_tool("delegate_task", {"goal": f"{HOLD} alpha's job"}, allow_claimed=True)
            assert isinstance(held, CreateTaskResult)
            done = (await call(alpha, "delegate_task", goal="alpha's quick job")).structured_content["delegation_id"]
            await call(alpha, "delegation_status", delegation_id=done)
            assert set(_ids(await call(alpha, "list_delegations"))) == {held.task_id, done}

            assert _ids(await call(impostor, "list_delegations")) == []
            for target in (held.task_id, done, done[:12]):
                for tool in ("delegation_status", "delegation_result", "stop_delegation"):
                    assert "no delegation" in await tool_error(impostor, tool, delegation_id=target)
            with pytest.raises(Exception, match="no such task"):
                await get_task(impostor.session, held.task_id)
            await cancel_task(impostor.session, held.task_id)  # acknowledged (the SEP), but nothing stops
            assert (await get_task(alpha.session, held.task_id)).status == "working"

            with anyio.fail_after(60):  # alpha's finished result was not acknowledged by the impostor's reads
                result = (await call(alpha, "delegation_result", delegation_id=done, wait_s=60)).structured_content
            assert result["state"] == "completed" and result["text"]
            model.gate.set()
            with anyio.fail_after(60):
                held_result = await call(alpha, "delegation_result", delegation_id=held.task_id, wait_s=60)
            assert held_result.structured_content["state"] == "completed"  # never stopped by the impostor
    anyio.run(body)


def test_a_revoked_token_s_wait_in_flight_is_refused_and_acknowledges_nothing(served, model, tmp_path):
    server, tokens = served

    async def body():
        async with http_client(server.url, tokens["a"], name="alpha") as alpha:
            handle = (await call(alpha, "delegate_task", goal=f"{HOLD} alpha's job")).structured_content
            outcome: list[str] = []
            waiting = anyio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                waiting.set()  # the wait is open on the server: its first progress report

            async def wait() -> None:
                result = await alpha.call_tool("delegation_result", {"delegation_id": handle["delegation_id"],
                                                                     "wait_s": 60}, progress_callback=on_progress)
                assert result.is_error, result
                outcome.append(result.content[0].text)
            async with anyio.create_task_group() as group:
                group.start_soon(wait)
                with anyio.fail_after(60):
                    await waiting.wait()
                TokenStore(tmp_path).remove("a")
                model.gate.set()  # the delegation finishes: the wait wakes and re-checks the token
            assert "revoked or rotated" in outcome[0] and "'a'" in outcome[0]
        async with mcp_client(tmp_path, "--all-namespaces", model=model, name="operator") as operator:
            with anyio.fail_after(60):
                while (status := (await call(operator, "delegation_status", delegation_id=handle["delegation_id"])
                                  ).structured_content)["state"] not in ("completed", "failed"):
                    await anyio.sleep(0.1)
            assert status["state"] == "completed" and status["delivered"] is False
    anyio.run(body)


def test_the_operator_token_is_one_namespace_of_its_own(served, model, tmp_path):
    server, tokens = served

    async def body():
        async with http_client(server.url, server.token, name="alpha") as operator:
            mine = (await call(operator, "delegate_task", goal="the operator's job")).structured_content["delegation_id"]
            await call(operator, "delegation_result", delegation_id=mine, wait_s=60)
        async with http_client(server.url, server.token, name="beta") as operator_again:  # its name is a label
            assert _ids(await call(operator_again, "list_delegations")) == [mine]
        async with http_client(server.url, tokens["a"], name="alpha") as alpha:
            assert _ids(await call(alpha, "list_delegations")) == []
            await call(alpha, "delegate_task", goal="a's job")
        async with http_client(server.url, server.token, name="alpha") as operator:
            assert _ids(await call(operator, "list_delegations")) == [mine]  # its own, not every namespace
        async with mcp_client(tmp_path, "--namespace", "token:operator", model=model) as local:
            assert _ids(await call(local, "list_delegations")) == [mine]  # stdio: the home's user chooses
    anyio.run(body)


def test_namespace_and_all_namespaces_over_http_are_the_operator_token_s_alone(tmp_path, model):
    store = TokenStore(tmp_path)
    client_token = store.add("a")

    shared = HttpServer(tmp_path, "--namespace", "shared", model=model)
    try:
        async def in_shared():
            async with http_client(shared.url, shared.token, name="x") as operator:
                ours = (await call(operator, "delegate_task", goal="shared job")).structured_content["delegation_id"]
            async with http_client(shared.url, client_token, name="x") as alpha:
                assert _ids(await call(alpha, "list_delegations")) == []  # --namespace is not the named token's
                theirs = (await call(alpha, "delegate_task", goal="a's job")).structured_content["delegation_id"]
            async with mcp_client(tmp_path, "--namespace", "shared", model=model) as local:
                assert _ids(await call(local, "list_delegations")) == [ours]
            return ours, theirs
        ours, theirs = anyio.run(in_shared)
    finally:
        shared.stop()
    overseer = HttpServer(tmp_path, "--all-namespaces", model=model)
    try:
        async def in_all():
            async with http_client(overseer.url, overseer.token, name="x") as operator:
                assert {ours, theirs} <= set(_ids(await call(operator, "list_delegations")))
            async with http_client(overseer.url, client_token, name="x") as alpha:
                assert _ids(await call(alpha, "list_delegations")) == [theirs]  # not the operator's view
        anyio.run(in_all)
    finally:
        overseer.stop()


def test_stdio_a_restarted_client_with_the_same_namespace_finds_its_delegations(tmp_path: Path, model):
    async def body():
        async with mcp_client(tmp_path, "--namespace", "project-x", model=model, name="alpha") as first:
            delegation_id = (await call(first, "delegate_task", goal="a job")).structured_content["delegation_id"]
            with anyio.fail_after(60):  # finished (not collected) before this server exits
                while (await call(first, "delegation_status", delegation_id=delegation_id)
                       ).structured_content["state"] != "completed":
                    await anyio.sleep(0.05)
        async with mcp_client(tmp_path, "--namespace", "project-x", model=model, name="renamed") as again:
            assert _ids(await call(again, "list_delegations")) == [delegation_id]  # the name is a label
            result = (await call(again, "delegation_result", delegation_id=delegation_id)).structured_content
            assert result["state"] == "completed" and result["text"] and result["delivered"]
        async with mcp_client(tmp_path, "--namespace", "project-y", model=model, name="alpha") as other:
            assert _ids(await call(other, "list_delegations")) == []
    anyio.run(body)


def test_a_session_is_used_with_the_token_that_opened_it_only(served):
    server, tokens = served
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "alpha", "version": "1"}}}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2025-06-18"}
    with httpx.Client(timeout=10) as raw:
        opened = raw.post(server.url, json=initialize, headers={**headers, "Authorization": f"Bearer {tokens['a']}"})
        assert opened.status_code == 200, opened.text
        session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        stolen = raw.post(server.url, json=ping, headers={**session, "Authorization": f"Bearer {tokens['b']}"})
        assert stolen.status_code == 404 and "belongs to the token that opened it" in stolen.text
        own = raw.post(server.url, json=ping, headers={**session, "Authorization": f"Bearer {tokens['a']}"})
        assert own.status_code == 200, own.text
