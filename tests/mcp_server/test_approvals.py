"""A subagent's command that needs approval, for an MCP client (issue 29 item 2): a client that
declared elicitation is asked while it waits on delegation_result and its answer decides; one
that did not gets the command denied at once, with the reason."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp_types import ElicitResult

from offload.testing.demo_script import last_role
from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply, tool_call_reply
from tests.mcp_server.mcp_support import call, mcp_client

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


@pytest.mark.parametrize("approve", [True, False])
def test_a_client_with_elicitation_is_asked_and_its_answer_decides(tmp_path: Path, model, approve: bool) -> None:
    workspace = _workspace(tmp_path)
    asked: list[str] = []
    notes: list[str] = []

    async def elicit(context, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": approve})

    async def body() -> str:
        async with mcp_client(tmp_path / "home", "--workspace", str(workspace), model=model, name="claude",
                              elicitation_callback=elicit) as client:
            return await _delegate_and_collect(client, notes)
    text = anyio.run(body)
    [message] = asked
    assert notes and "waiting for your approval: call delegation_result again" in notes[0], notes
    assert COMMAND in message and "destructive" in message and "apr_" in message, message
    if approve:
        assert "REPORT: [approved by mcp:claude (request apr_" in text and "removed" in text, text
        assert not (workspace / "build").exists()
    else:
        assert "REPORT: Error: run_command: command not run" in text and "mcp:claude denied it" in text, text
        assert (workspace / "build").exists()


def test_a_client_without_elicitation_gets_the_command_denied_with_the_reason(tmp_path: Path, model) -> None:
    workspace = _workspace(tmp_path)

    async def body() -> str:
        async with mcp_client(tmp_path / "home", "--workspace", str(workspace), model=model) as client:
            return await _delegate_and_collect(client)
    text = anyio.run(body)
    assert "needs a person's approval" in text and "did not declare the elicitation capability" in text, text
    assert (workspace / "build").exists()
