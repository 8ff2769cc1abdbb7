"""``TelegramPlatform``: the ``Platform`` seam over the Bot API.

Owns the update offset: it is persisted in the gateway state only after every update of a
batch was handed to the app, so a restart never skips one (a crash in the middle of a batch
hands that batch over again); the mapping of Telegram chats and forum topics to
session-key chat types, inline buttons (sent as an inline keyboard, pressed as a
``callback_query``, answered with ``answerCallbackQuery``), and HTML rendering of what we send.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

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
                                                  "allowed_updates": ["message", "callback_query"]},
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
             on_part: Callable[[int], None] | None = None, buttons: Sequence[tuple[str, str]] = ()) -> list[str]:
        ids = []
        parts = render_parts(body, header, self.limit_chars)  # the same text splits the same way every time
        for number, part in enumerate(parts[first_part:], start=first_part + 1):
            payload = {**_target(route), "text": part, "parse_mode": "HTML"}
            if buttons and number == len(parts):
                payload["reply_markup"] = {"inline_keyboard": [[{"text": label, "callback_data": data}
                                                                for label, data in buttons]]}
            result = self.client.call("sendMessage", payload)
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


    def answer_button(self, press_id: str, text: str) -> None:
        self.client.call("answerCallbackQuery", {"callback_query_id": press_id, "text": text[:200]})


def _target(route: Route) -> dict[str, Any]:
    target: dict[str, Any] = {"chat_id": route.chat_id}
    if route.thread_id:
        target["message_thread_id"] = int(route.thread_id)
    return target


def _incoming(update: dict[str, Any]) -> Incoming | None:
    press = update.get("callback_query")
    if isinstance(press, dict):
        return _pressed(press)
    message = update.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("text"), str):
        return None  # stickers, joins, edits: nothing for the agent
    where = _where(message)
    return Incoming(*where, text=message["text"], **_sender(message)) if where else None


def _pressed(press: dict[str, Any]) -> Incoming | None:
    """A press of an inline button under one of our messages (a ``callback_query``)."""
    message = press.get("message") if isinstance(press.get("message"), dict) else {}
    where = _where(message)
    if where is None or not isinstance(press.get("data"), str) or not press.get("id"):
        return None  # a press on a message too old for Telegram to include: nothing to route it by
    return Incoming(*where, text="", button=press["data"], press_id=str(press["id"]),
                    message_id=str(message.get("message_id", "")), **_sender(press))


def _where(message: dict[str, Any]) -> tuple[Route, str] | None:
    """The route of a message and its session-key chat type, or None without a chat."""
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    if "id" not in chat:
        return None
    # Outside forum topics message_thread_id also marks reply chains: only a topic is a thread.
    thread = message.get("message_thread_id") if message.get("is_topic_message") else None
    chat_type = "dm" if chat.get("type") == "private" else ("thread" if thread else "group")
    return Route(str(chat["id"]), str(thread) if thread else ""), chat_type


def _sender(obj: dict[str, Any]) -> dict[str, str]:
    sender = obj.get("from") if isinstance(obj.get("from"), dict) else {}
    return {"user_id": str(sender.get("id", "")), "user_name": str(sender.get("username") or sender.get("first_name") or "")}
