"""A subagent's command that needs approval, for an MCP client (issue 29 item 2): a client that
declared elicitation is asked while it waits on delegation_result and its answer decides; one
that did not gets the command denied at once, with the reason. A client polling the delegation
as an MCP task sees it ``input_required`` with the question in ``inputRequests`` until it answers
with ``tasks/update``; the SDK client with offload's TasksClient asks its elicitation callback."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp_types import ElicitResult

from offload.mcp_server.tasks_client import CreateTaskResult, TaskState, TasksClient, get_task, poll, update_task
from offload.testing.demo_script import last_role
from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply, tool_call_reply
from offload.access.tokens import TokenStore
from tests.mcp_server.mcp_support import HttpServer, call, http_client, mcp_client

pytestmark = pytest.mark.timeout(120)
COMMAND = "rm -rf build && echo removed"


class CommandModel:
    """The children's model: runs COMMAND, then reports the tool's answer as its result."""

    def __init__(self) -> None:
        self.server = ScriptedModelServer(self.script)

    def script(self, request: dict[str, Any]):
        if last_role(request) == "tool":
            return text_reply(f"REPORT: {last_message_text(request)[:400]}")
        return tool_call_reply("run_command", {"command": COMMAND})


@pytest.fixture
def model():
    command_model = CommandModel()
    with command_model.server:
        yield command_model


def _workspace(tmp_path: Path) -> Path:
    """A home with delegation.approvals: ask, and a workspace outside it."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.yaml").write_text(yaml.safe_dump({"delegation": {"approvals": "ask"}}), encoding="utf-8")
    workspace = tmp_path / "ws"
    (workspace / "build").mkdir(parents=True)
    return workspace


async def _delegate_and_collect(client, notes: list[str] | None = None) -> str:
    """As a client does: delegate, then call delegation_result until the result is in."""
    handle = (await call(client, "delegate_task", goal="clean the build")).structured_content
    for _ in range(5):
        result = await call(client, "delegation_result", delegation_id=handle["delegation_id"], wait_s=60)
        if result.structured_content.get("text") is not None:
            return result.content[0].text
        if notes is not None:
            notes.append(result.content[0].text)
    raise AssertionError(f"no result after 5 calls: {result.content[0].text}")


def answering(approve: bool, asked: list[str]):
    """An elicitation callback that records each question and answers ``approve``."""
    async def elicit(context, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": approve})
    return elicit


def assert_decided(text: str, workspace: Path, approve: bool, by: str = "mcp:claude") -> None:
    """The subagent's report says who decided (``by``), and the command ran only if approved."""
    if approve:
        assert f"REPORT: [approved by {by} (request apr_" in text and "removed" in text, text
        assert not (workspace / "build").exists()
    else:
        assert "REPORT: Error: run_command: command not run" in text and f"{by} denied it" in text, text
        assert (workspace / "build").exists()


@pytest.mark.parametrize("approve", [True, False])
def test_a_client_with_elicitation_is_asked_and_its_answer_decides(tmp_path: Path, model, approve: bool) -> None:
    workspace = _workspace(tmp_path)
    asked: list[str] = []
    notes: list[str] = []

    async def body() -> str:
        async with mcp_client(tmp_path / "home", "--workspace", str(workspace), model=model, name="claude",
                              elicitation_callback=answering(approve, asked)) as client:
            return await _delegate_and_collect(client, notes)
    text = anyio.run(body)
    [message] = asked
    assert notes and "waiting for your approval: call delegation_result again" in notes[0], notes
    assert COMMAND in message and "destructive" in message and "apr_" in message, message
    assert_decided(text, workspace, approve)


def test_a_client_without_elicitation_gets_the_command_denied_with_the_reason(tmp_path: Path, model) -> None:
    workspace = _workspace(tmp_path)

    async def body() -> str:
        async with mcp_client(tmp_path / "home", "--workspace", str(workspace), model=model) as client:
            return await _delegate_and_collect(client)
    text = anyio.run(body)
    assert "needs a person's approval" in text and "did not declare the elicitation capability" in text, text
    assert (workspace / "build").exists()


@pytest.mark.parametrize("approve", [True, False])
def test_a_task_goes_input_required_and_the_task_clients_elicitation_answer_decides(
        tmp_path: Path, model, approve: bool) -> None:
    workspace = _workspace(tmp_path)
    asked: list[str] = []
    states: list[dict] = []

    async def on_task(state: dict) -> None:
        states.append(state)

    async def body():
        async with mcp_client(tmp_path / "home", "--workspace", str(workspace), model=model, name="claude",
                              elicitation_callback=answering(approve, asked),
                              extensions=[TasksClient(on_task)]) as client:
            return await client.call_tool("delegate_task", {"goal": "clean the build"})
    result = anyio.run(body)
    [message] = asked  # once, however many polls showed the request
    assert COMMAND in message and "destructive" in message, message
    waiting = [s for s in states if s["status"] == "input_required"]
    assert waiting and states[0]["status"] == "working" and states[-1]["status"] == "completed", states
    [(key, request)] = waiting[0]["inputRequests"].items()
    assert key.startswith("apr_") and request["method"] == "elicitation/create", request
    assert request["params"]["requestedSchema"]["properties"]["approve"]["type"] == "boolean"
    assert "waiting for your approval" in waiting[0]["statusMessage"]
    assert_decided(result.content[0].text, workspace, approve)


async def _input_required(session, task_id: str) -> TaskState:
    with anyio.fail_after(60):
        while (state := await get_task(session, task_id)).status != "input_required":
            assert state.status == "working", state
            await anyio.sleep(0.05)
    return state


def test_a_task_stays_input_required_until_tasks_update_answers_its_key(tmp_path: Path, model) -> None:
    """Answers under an unknown key, or from another namespace's client, decide nothing."""
    workspace = _workspace(tmp_path)
    home = tmp_path / "home"

    async def never(context, params) -> ElicitResult:
        raise AssertionError("the test answers with tasks/update itself")

    async def body() -> str:
        options = dict(model=model, elicitation_callback=never, extensions=[TasksClient()])
        async with mcp_client(home, "--workspace", str(workspace), name="claude", **options) as client:
            created = await client.session.call_tool("delegate_task", {"goal": "clean the build"}, allow_claimed=True)
            assert isinstance(created, CreateTaskResult)
            state = await _input_required(client.session, created.task_id)
            [key] = state.input_requests
            await update_task(client.session, created.task_id, {"apr_unknown": {"action": "accept",
                                                                               "content": {"approve": True}}})
            assert (await get_task(client.session, created.task_id)).input_requests == state.input_requests
            async with mcp_client(home, "--workspace", str(workspace), name="mallory", **options) as other:
                await update_task(other.session, created.task_id, {key: {"action": "accept",
                                                                        "content": {"approve": True}}})
            assert (await _input_required(client.session, created.task_id)).input_requests == state.input_requests
            await update_task(client.session, created.task_id, {key: {"action": "accept", "content": {"approve": True}}})
            assert (await get_task(client.session, created.task_id)).status in ("working", "completed")
            with anyio.fail_after(60):
                return (await poll(client.session, created.task_id)).content[0].text
    assert_decided(anyio.run(body), workspace, approve=True)


def test_a_task_over_streamable_http_is_asked_and_approved_too(tmp_path: Path, model) -> None:
    """tasks/get and tasks/update over Streamable HTTP, as a remote client sends them."""
    workspace = _workspace(tmp_path)
    asked: list[str] = []
    server = HttpServer(tmp_path / "home", "--workspace", str(workspace), model=model)

    async def body():
        async with http_client(server.url, server.token, name="claude", elicitation_callback=answering(True, asked),
                               extensions=[TasksClient()]) as client:
            return await client.call_tool("delegate_task", {"goal": "clean the build"})
    try:
        result = anyio.run(body)
    finally:
        server.stop()
    [message] = asked
    assert COMMAND in message, message
    assert_decided(result.content[0].text, workspace, approve=True, by="mcp:claude via token operator")


def test_over_http_another_token_s_client_of_the_same_name_cannot_approve(tmp_path: Path, model) -> None:
    """Namespaces follow the token (issue 43 point 7): a client calling itself "claude" with
    another token neither answers the task's question (tasks/update) nor is asked it."""
    workspace = _workspace(tmp_path)
    store = TokenStore(tmp_path / "home")
    tokens = {"a": store.add("a"), "b": store.add("b")}
    impostor_asked: list[str] = []
    server = HttpServer(tmp_path / "home", "--workspace", str(workspace), model=model)

    async def never(context, params) -> ElicitResult:
        raise AssertionError("the owner answers with tasks/update itself")

    async def body() -> str:
        async with http_client(server.url, tokens["a"], name="claude", elicitation_callback=never,
                               extensions=[TasksClient()]) as owner, \
                http_client(server.url, tokens["b"], name="claude", elicitation_callback=answering(True, impostor_asked),
                            extensions=[TasksClient()]) as impostor:
            created = await owner.session.call_tool("delegate_task", {"goal": "clean the build"}, allow_claimed=True)
            state = await _input_required(owner.session, created.task_id)
            [key] = state.input_requests
            yes = {key: {"action": "accept", "content": {"approve": True}}}
            await update_task(impostor.session, created.task_id, yes)  # acknowledged (the SEP), decides nothing
            refused = await impostor.call_tool("delegation_result", {"delegation_id": created.task_id, "wait_s": 0})
            assert refused.is_error and "no delegation" in refused.content[0].text, refused
            assert (await _input_required(owner.session, created.task_id)).input_requests == state.input_requests
            await update_task(owner.session, created.task_id, yes)
            with anyio.fail_after(60):
                return (await poll(owner.session, created.task_id)).content[0].text
    try:
        text = anyio.run(body)
    finally:
        server.stop()
    assert impostor_asked == []
    assert_decided(text, workspace, approve=True, by="mcp:claude via token a")
