"""Harness for ``offload gateway`` end to end: the fake Bot API, a gateway config, scripted
parents that delegate per chat, and queries over what the bot sent."""
from __future__ import annotations

from typing import Any, Callable

import yaml

from offload.gateway.telegram.fake_api import FakeBotApi, Sent, parse_html
from offload.testing.demo_script import last_role, request_role, subagent_goal
from offload.testing.model_server import Reply, ScriptedModelServer, last_message_text, text_reply, tool_call_reply

TOKEN = "123456:gateway-e2e-token"
DM, GROUP, TOPIC = 7, -1001, 55
RESULT_HEADER = "Background result "


def write_gateway_config(home, workspace, server: ScriptedModelServer, api: FakeBotApi,
                         gateway: dict[str, Any] | None = None, top: dict[str, Any] | None = None,
                         **delegation: Any) -> None:
    """``top`` adds or replaces top-level sections (``toolsets``, ``web`` …)."""
    data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "delegation"], "delegation": delegation,
            "gateway": {"telegram": {"base_url": api.url, "allowed_chat_ids": [DM, GROUP], "poll_timeout_s": 1,
                                     "send_attempts": 4},
                        "retry_backoff_s": 0.2, "roster_interval_s": 0.2, **(gateway or {})}, **(top or {})}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def chat_parent(delegate_for: Callable[[str], dict[str, Any]], child: Callable[[dict], Reply],
                after_tool: Reply | None = None, on_result: Reply | None = None) -> Callable[[dict], Reply]:
    """A parent that delegates ``delegate_for(user text)`` on every user message, and answers
    each injected result (single or coalesced batch) with ``on_result``."""
    def script(request: dict[str, Any]) -> Reply:
        if request_role(request) == "subagent":
            return child(request)
        if last_role(request) == "tool":
            return after_tool or text_reply("Started it in the background.")
        text = last_message_text(request)
        if text.startswith(("[ASYNC DELEGATION", "[IMPORTANT")):
            return on_result or text_reply("Result noted.")
        return tool_call_reply("delegate_task", delegate_for(text))
    return script


def echo_goal(request: dict[str, Any]) -> Reply:
    return text_reply(f"result of {subagent_goal(request)}")


def visible(message: Sent) -> str:
    """What a user sees of a message (its last edit), markup removed."""
    text, problem = parse_html(message.edits[-1] if message.edits else message.text)
    assert problem == "", f"Telegram would refuse {message.text[:200]!r}: {problem}"
    return text


def shown(api: FakeBotApi, chat_id: int, thread_id: int | None = None) -> str:
    return "\n".join(visible(m) for m in api.messages(chat_id, thread_id))


def result_headers(api: FakeBotApi, chat_id: int | None = None) -> list[str]:
    """The first line of every result message sent (to one chat, or anywhere)."""
    return [visible(m).split("\n", 1)[0] for m in api.messages(chat_id) if visible(m).startswith(RESULT_HEADER)]
