"""A subagent's command that needs a person's approval (``delegation.approvals: ask``, issue 29
item 2), as a Telegram user answers it: ``offload gateway`` in a subprocess against the
loopback fake Bot API sends the request to the chat the delegation came from, with Approve and
Deny buttons; a press decides it (the press is answered, the message says who decided and
loses its buttons) and the child runs the command or gets a tool error; a request answered on
another surface (``offload approvals``) has its message settled too. Every wait is on a
message or an answer the fake received, never a fixed sleep."""
from __future__ import annotations

from pathlib import Path

import pytest

from offload.gateway.telegram.fake_api import FakeBotApi, Sent
from offload.testing.demo_script import last_role
from offload.testing.model_server import last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import offload
from tests.e2e.gateway_harness import DM, chat_parent, shown, visible
from tests.e2e.test_gateway_e2e import api, configure, start_gateway, stop, wait_shown  # noqa: F401 - fixtures

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def cleaning_child(request):
    """Removes the build folder (destructive: needs approval under ``ask``), then reports."""
    if last_role(request) == "tool":
        return text_reply(f"REPORT: {last_message_text(request)[:300]}")
    return tool_call_reply("run_command", {"command": "rm -rf build && echo removed"})


@pytest.fixture
def build_dir(workspace: Path) -> Path:
    (workspace / "build").mkdir()
    (workspace / "build" / "out.o").write_text("object", encoding="utf-8")
    return workspace / "build"


def request_message(api: FakeBotApi) -> Sent:
    assert api.wait_until(lambda: [m for m in api.messages(DM) if m.buttons], 60), shown(api, DM)
    [message] = [m for m in api.messages(DM) if m.buttons]
    return message


def start_asking(api, configure, start_gateway):
    configure(chat_parent(lambda text: {"goal": "clean the build"}, cleaning_child), approvals="ask")
    gateway = start_gateway()
    api.user_says(DM, "clean up please")
    message = request_message(api)
    text = visible(message)
    assert text.startswith("Approval needed") and "rm -rf build && echo removed" in text, text
    assert "removes folders recursively" in text and "no answer by then denies it" in text, text
    assert [label for label, _ in message.buttons] == ["Approve", "Deny"]
    return gateway, message


def test_approve_in_the_chat_runs_the_command(api, configure, start_gateway, build_dir, runtime):
    gateway, message = start_asking(api, configure, start_gateway)
    request_id = message.buttons[0][1].split(":")[1]
    press = api.press(message, message.buttons[0][1])
    assert api.wait_until(lambda: api.answered.get(press), 60) and api.answered[press].startswith("Approved")
    wait_shown(api, DM, "REPORT:")
    assert "removed" in shown(api, DM) and not build_dir.exists()
    assert "approved by telegram:u" in visible(message) and message.buttons == []
    [row] = runtime.ledger().approvals(request_id=request_id)  # recorded: who, and what
    assert (row["state"], row["decided_by"], row["command"]) == ("allowed", "telegram:u", "rm -rf build && echo removed")
    stop(gateway)


def test_deny_in_the_chat_is_a_tool_error_to_the_child(api, configure, start_gateway, build_dir):
    gateway, message = start_asking(api, configure, start_gateway)
    press = api.press(message, message.buttons[1][1])
    assert api.wait_until(lambda: api.answered.get(press), 60) and api.answered[press].startswith("Denied")
    wait_shown(api, DM, "REPORT:")
    assert "telegram:u denied it" in shown(api, DM) and build_dir.exists()
    assert "denied by telegram:u" in visible(message) and message.buttons == []
    stop(gateway)


def test_a_request_answered_elsewhere_loses_its_buttons_in_the_chat(api, configure, start_gateway, build_dir):
    gateway, message = start_asking(api, configure, start_gateway)
    request_id = message.buttons[0][1].split(":")[1]
    answered = offload("approvals", "deny", request_id)
    assert answered.returncode == 0, answered
    assert api.wait_until(lambda: not message.buttons, 60), message
    assert "denied by cli:" in visible(message), visible(message)
    wait_shown(api, DM, "REPORT:")
    stop(gateway)
