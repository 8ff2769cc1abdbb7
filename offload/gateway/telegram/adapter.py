"""``TelegramPlatform``: the ``Platform`` seam over the Bot API.

Owns the update offset: it is persisted in the gateway state only after every update of a
batch was handed to the app, so a restart never skips one (a crash in the middle of a batch
hands that batch over again); the mapping of Telegram chats and forum topics to
session-key chat types, and HTML rendering of what we send.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from offload.gateway.platform import Incoming, Route
from offload.gateway.state import GatewayState
from offload.gateway.telegram.client import TelegramClient, TelegramError
from offload.gateway.telegram.text import MAX_MESSAGE_CHARS, render_parts

logger = logging.getLogger(__name__)


class TelegramPlatform:
    name = "telegram"
    delivers_later = True  # a bot may write to a chat at any time

    def __init__(self, client: TelegramClient, state: GatewayState, limit_chars: int = MAX_MESSAGE_CHARS) -> None:
        self.client, self.state, self.limit_chars = client, state, limit_chars

    def poll(self, timeout_s: float, handle: Callable[[Incoming], None]) -> int:
        offset = int(self.state.read().get("offset") or 0)
        updates = self.client.call("getUpdates", {"offset": offset, "timeout": int(timeout_s),
                                                  "allowed_updates": ["message"]},
                                   read_timeout_s=timeout_s + 10)
        updates = [u for u in updates if isinstance(u, dict)] if isinstance(updates, list) else []
        for update in updates:
            message = _incoming(update)
            if message is not None:
                handle(message)
        if updates:
            last = max(int(u.get("update_id") or 0) for u in updates)
            self.state.update(lambda data: data.__setitem__("offset", max(int(data.get("offset") or 0), last + 1)))
        return len(updates)

    def send(self, route: Route, body: str, header: str = "", first_part: int = 0,
             on_part: Callable[[int], None] | None = None) -> list[str]:
        ids = []
        parts = render_parts(body, header, self.limit_chars)  # the same text splits the same way every time
        for number, part in enumerate(parts[first_part:], start=first_part + 1):
            result = self.client.call("sendMessage", {**_target(route), "text": part, "parse_mode": "HTML"})
            ids.append(str((result or {}).get("message_id", "")))
            if on_part is not None:
                on_part(number)
        return ids

    def edit(self, route: Route, message_id: str, body: str, header: str = "") -> None:
        text = render_parts(body, header, self.limit_chars)[0]  # a roster bubble stays one message
        try:
            self.client.call("editMessageText", {"chat_id": route.chat_id, "message_id": int(message_id),
                                                 "text": text, "parse_mode": "HTML"})
        except TelegramError as exc:
            if "not modified" not in str(exc):
                raise


def _target(route: Route) -> dict[str, Any]:
    target: dict[str, Any] = {"chat_id": route.chat_id}
    if route.thread_id:
        target["message_thread_id"] = int(route.thread_id)
    return target


def _incoming(update: dict[str, Any]) -> Incoming | None:
    message = update.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("text"), str):
        return None  # stickers, joins, edits: nothing for the agent
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    if "id" not in chat:
        return None
    # Outside forum topics message_thread_id also marks reply chains: only a topic is a thread.
    thread = message.get("message_thread_id") if message.get("is_topic_message") else None
    private = chat.get("type") == "private"
    chat_type = "dm" if private else ("thread" if thread else "group")
    sender = message.get("from") if isinstance(message.get("from"), dict) else {}
    return Incoming(route=Route(str(chat["id"]), str(thread) if thread else ""), chat_type=chat_type,
                    text=message["text"], user_id=str(sender.get("id", "")),
                    user_name=str(sender.get("username") or sender.get("first_name") or ""))
