"""A loopback fake of the Telegram Bot API for tests: a real HTTP server, not a mock.

It serves ``getUpdates`` (long polling on a condition, honouring ``offset``), ``sendMessage``
and ``editMessageText`` (an inline keyboard in ``reply_markup``; an edit without one removes
it, as Telegram does) and ``answerCallbackQuery`` at ``/bot<token>/<method>`` like
api.telegram.org, and keeps what the bot sent. ``press(message, data)`` is a person pressing one
of a message's inline buttons (a ``callback_query`` update); ``answered`` keeps the answers. Faults are scripted per method: ``fail(method, status, times, retry_after=...)``,
``hold(method)`` / ``release(method)`` (requests wait in between),
``block(chat_id)`` (403 "bot was blocked by the user"), ``delete_chat(chat_id)`` (400 "chat
not found"). It enforces what Telegram enforces and our adapter must respect: the token, the
4,096-character limit (of the visible text, in UTF-16 units), and well-formed HTML with only
the tags we use and no bare ``&`` (so unescaped child output fails loudly here, as it would
in Telegram).

Invariants: binds 127.0.0.1 only; ``stop()`` wakes every long poll and returns promptly.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from offload.gateway.telegram.text import MAX_MESSAGE_CHARS, telegram_length


@dataclass
class Sent:
    chat_id: str
    thread_id: str
    text: str
    message_id: int
    edits: list[str] = field(default_factory=list)
    buttons: list[tuple[str, str]] = field(default_factory=list)  # (label, data) of its inline keyboard now


@dataclass(frozen=True)
class _Fault:
    status: int
    retry_after: float | None
    when: Callable[[dict[str, Any]], bool] | None


class _StrictHtml(HTMLParser):
    """Accepts only <b>...</b>, balanced; anything else means our escaping failed."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth, self.problem, self.text = 0, "", []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag != "b":
            self.problem = self.problem or f"unsupported start tag <{tag}>"
        self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        self.depth -= 1
        if tag != "b" or self.depth < 0:
            self.problem = self.problem or f"unexpected end tag </{tag}>"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


_BARE_AMP = re.compile(r"&(?!(?:[a-zA-Z]+|#[0-9]+|#x[0-9a-fA-F]+);)")


def parse_html(text: str) -> tuple[str, str]:
    """(visible text, problem) as Telegram's HTML parse mode sees ``text``; problem "" if fine."""
    if _BARE_AMP.search(text):
        return "", "unescaped '&' (must be &amp;)"
    parser = _StrictHtml()
    parser.feed(text)
    parser.close()
    if parser.rawdata:
        return "", f"unterminated tag at {parser.rawdata[:20]!r}"
    return "".join(parser.text), parser.problem or ("unclosed tag" if parser.depth else "")


class FakeBotApi:
    def __init__(self, token: str = "123:fake-token") -> None:
        self.token = token
        self._cond = threading.Condition()
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self._faults: dict[str, list[_Fault]] = {}
        self.gone: dict[str, tuple[int, str]] = {}  # chat id -> the error every send to it gets
        self.sent: list[Sent] = []
        self.calls: list[str] = []  # method names in arrival order, faults included
        self.answered: dict[str, str] = {}  # callback query id -> the text the bot answered it with
        self._held: set[str] = set()
        self._stopping = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeBotApi:
        self._thread.start()
        return self

    def __enter__(self) -> FakeBotApi:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # -- scripting ------------------------------------------------------------------------
    def user_says(self, chat_id: int, text: str, *, chat_type: str = "private", thread_id: int | None = None,
                  user_id: int = 42) -> None:
        message: dict[str, Any] = {"message_id": next(self._message_ids), "date": int(time.time()), "text": text,
                                   "chat": {"id": chat_id, "type": chat_type}, "from": {"id": user_id, "username": "u"}}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        with self._cond:
            self._updates.append({"update_id": next(self._update_ids), "message": message})
            self._cond.notify_all()

    def press(self, message: Sent, data: str, user_id: int = 42, chat_type: str = "private") -> str:
        """A person presses the button ``data`` under ``message`` (which must show it now); the
        callback query's id, whose answer lands in ``answered``."""
        with self._cond:
            assert data in [d for _, d in message.buttons], f"message {message.message_id} shows no button {data!r}"
            press_id = f"cbq{next(self._update_ids)}"
            shown = {"message_id": message.message_id, "chat": {"id": int(message.chat_id), "type": chat_type},
                     "text": message.edits[-1] if message.edits else message.text}
            if message.thread_id:
                shown.update(message_thread_id=int(message.thread_id), is_topic_message=True)
            self._updates.append({"update_id": next(self._update_ids), "callback_query": {
                "id": press_id, "from": {"id": user_id, "username": "u"}, "message": shown, "data": data}})
            self._cond.notify_all()
            return press_id

    def fail(self, method: str, status: int, times: int = 1, retry_after: float | None = None,
             when: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """The next ``times`` requests to ``method`` (whose body ``when`` accepts) get ``status``."""
        with self._cond:
            self._faults.setdefault(method, []).extend([_Fault(status, retry_after, when)] * times)

    def hold(self, method: str) -> None:
        """Requests to ``method`` wait (counted in ``calls``) until ``release(method)``."""
        with self._cond:
            self._held.add(method)

    def release(self, method: str) -> None:
        with self._cond:
            self._held.discard(method)
            self._cond.notify_all()

    def block(self, chat_id: int | str) -> None:
        """The user blocked the bot: every send to the chat is a 403."""
        with self._cond:
            self.gone[str(chat_id)] = (403, "Forbidden: bot was blocked by the user")

    def delete_chat(self, chat_id: int | str) -> None:
        """The chat no longer exists: every send to it is a 400 "chat not found"."""
        with self._cond:
            self.gone[str(chat_id)] = (400, "Bad Request: chat not found")

    def messages(self, chat_id: int | str | None = None, thread_id: int | str | None = None) -> list[Sent]:
        with self._cond:
            return [m for m in self.sent if (chat_id is None or m.chat_id == str(chat_id))
                    and (thread_id is None or m.thread_id == str(thread_id))]

    def wait_until(self, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        """Block until ``check()`` is truthy (re-checked on every request); its value, or None."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                value = check()
                remaining = deadline - time.monotonic()
                if value or remaining <= 0:
                    return value
                self._cond.wait(min(remaining, 0.5))

    # -- serving --------------------------------------------------------------------------
    def handle(self, token: str, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            self.calls.append(method)
            self._cond.notify_all()
            if token != self.token:
                return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            while method in self._held and not self._stopping:
                self._cond.wait()
            fault = next((f for f in self._faults.get(method, []) if f.when is None or f.when(body)), None)
            if fault is not None:
                self._faults[method].remove(fault)
                return fault.status, _error(fault.status, fault.retry_after)
        if method == "getUpdates":
            return 200, {"ok": True, "result": self._get_updates(body)}
        if method in ("sendMessage", "editMessageText"):
            return self._post(method, body)
        if method == "answerCallbackQuery":
            with self._cond:
                self.answered[str(body.get("callback_query_id"))] = str(body.get("text") or "")
                self._cond.notify_all()
            return 200, {"ok": True, "result": True}
        return 404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"}

    def _get_updates(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(body.get("offset") or 0)
        deadline = time.monotonic() + min(float(body.get("timeout") or 0), 30.0)
        with self._cond:
            while True:
                self._updates = [u for u in self._updates if u["update_id"] >= offset]  # confirmed: forget
                if self._updates or self._stopping or time.monotonic() >= deadline:
                    return list(self._updates)
                self._cond.wait(max(0.0, deadline - time.monotonic()))

    def _post(self, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        chat_id, text = str(body.get("chat_id", "")), str(body.get("text", ""))
        visible, problem = parse_html(text) if body.get("parse_mode") == "HTML" else (text, "")
        with self._cond:
            gone = self.gone.get(chat_id)
            if gone:
                return gone[0], {"ok": False, "error_code": gone[0], "description": gone[1]}
            if problem:
                return 400, {"ok": False, "error_code": 400, "description": f"Bad Request: can't parse entities: {problem}"}
            if not visible.strip():
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message text is empty"}
            if telegram_length(visible) > MAX_MESSAGE_CHARS:
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message is too long"}
            if method == "editMessageText":
                return self._edit(chat_id, body.get("message_id"), text, _buttons(body))
            sent = Sent(chat_id, str(body.get("message_thread_id") or ""), text, next(self._message_ids),
                        buttons=_buttons(body))
            self.sent.append(sent)
            self._cond.notify_all()
            return 200, {"ok": True, "result": {"message_id": sent.message_id, "chat": {"id": chat_id}}}

    def _edit(self, chat_id: str, message_id: Any, text: str,
              buttons: list[tuple[str, str]]) -> tuple[int, dict[str, Any]]:
        target = next((m for m in self.sent if m.message_id == message_id and m.chat_id == chat_id), None)
        if target is None:
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message to edit not found"}
        if text == (target.edits[-1] if target.edits else target.text):
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message is not modified"}
        target.edits.append(text)
        target.buttons = buttons
        self._cond.notify_all()
        return 200, {"ok": True, "result": {"message_id": target.message_id}}


def _buttons(body: dict[str, Any]) -> list[tuple[str, str]]:
    markup = body.get("reply_markup") if isinstance(body.get("reply_markup"), dict) else {}
    return [(str(b.get("text")), str(b.get("callback_data"))) for row in markup.get("inline_keyboard") or []
            for b in row if isinstance(b, dict)]


def _error(status: int, retry_after: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": f"scripted error {status}"}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
        body["description"] = f"Too Many Requests: retry after {retry_after}"
    return body


def _handler_for(api: FakeBotApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            parts = self.path.strip("/").split("/")
            if len(parts) != 2 or not parts[0].startswith("bot"):
                status, reply = 404, {"ok": False, "error_code": 404, "description": "Not Found"}
            else:
                status, reply = api.handle(parts[0][3:], parts[1], body if isinstance(body, dict) else {})
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
