"""A small Telegram Bot API client over httpx: one ``call`` with the retry policy.

Policy: 429 waits the ``retry_after`` Telegram asks for (capped); 5xx, 409 (another poller)
and network errors retry with exponential backoff; 403 and "chat not found"-style 400s raise
``ChatGone`` at once (retrying cannot help); any other 4xx raises ``TelegramError``; 401 raises
``TelegramAuthError`` naming the config key to fix. When the attempt budget runs out the call
raises ``SendFailed`` and the caller keeps its result pending.

Invariant: the bot token never reaches a log or an exception message. It lives only in the
request URL, httpx's own request logging is silenced, and errors are rebuilt from the status
and Telegram's description, never from httpx's exception text (which can quote the URL).
"""
from __future__ import annotations

import logging
import threading
from typing import Any

import httpx

from offload.gateway.platform import ChatGone, SendFailed

logger = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs every request URL, token included
logging.getLogger("httpcore").setLevel(logging.WARNING)

_GONE_PHRASES = ("chat not found", "bot was blocked", "bot was kicked", "user is deactivated",
                 "not enough rights to send", "group chat was deactivated", "have no rights to send")


_BACKOFF = -1.0  # "wait the exponential backoff for this attempt"


class TelegramError(Exception):
    """A request Telegram refused for a reason retrying cannot fix (a bug on our side)."""


class TelegramAuthError(TelegramError):
    """The token is wrong or revoked."""


class TelegramClient:
    def __init__(self, base_url: str, token: str, *, max_attempts: int = 8, backoff_s: float = 0.5,
                 max_wait_s: float = 30.0, stop: threading.Event | None = None) -> None:
        self._root = f"{base_url.rstrip('/')}/bot{token}/"
        self._http = httpx.Client(timeout=httpx.Timeout(10.0, read=70.0))
        self.max_attempts, self.backoff_s, self.max_wait_s = max_attempts, backoff_s, max_wait_s
        self.stop = stop or threading.Event()

    def close(self) -> None:
        self._http.close()

    def call(self, method: str, payload: dict[str, Any], *, read_timeout_s: float = 10.0) -> Any:
        """POST ``method`` with ``payload``; Telegram's ``result`` or one of the errors above."""
        last = "no attempt made"
        for attempt in range(self.max_attempts):
            wait_s, last = self._attempt(method, payload, read_timeout_s)
            if wait_s is None:
                return last
            if attempt + 1 == self.max_attempts:
                break  # no point waiting after the last attempt
            if wait_s == _BACKOFF:
                wait_s = self.backoff_s * 2 ** attempt
            wait_s = min(wait_s, self.max_wait_s)
            logger.info("telegram %s: %s; retrying in %.1f s (attempt %d/%d)", method, last, wait_s,
                        attempt + 1, self.max_attempts)
            if self.stop.wait(wait_s):
                break
        raise SendFailed(f"telegram {method} still failing after {self.max_attempts} attempts: {last}")

    def _attempt(self, method: str, payload: dict[str, Any], read_timeout_s: float) -> tuple[float | None, Any]:
        """(None, result) on success, or (seconds to wait, why) for a retryable failure."""
        backoff_s = _BACKOFF
        try:
            response = self._http.post(self._root + method, json=payload,
                                       timeout=httpx.Timeout(10.0, read=read_timeout_s))
        except httpx.HTTPError as exc:
            return backoff_s, f"network error ({type(exc).__name__})"  # str(exc) may quote the URL
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        status = response.status_code
        if status == 200 and body.get("ok"):
            return None, body.get("result")
        description = str(body.get("description") or response.reason_phrase or "")
        params = body.get("parameters") if isinstance(body.get("parameters"), dict) else {}
        if status == 429:
            return float(params.get("retry_after") or 1), f"429 rate limited ({description})"
        if status >= 500 or status == 409:
            return backoff_s, f"{status} {description}"
        if status == 401:
            raise TelegramAuthError("Telegram rejected the bot token (401): check the variable that "
                                    "gateway.telegram.token_env names, or get a new token from @BotFather")
        if status == 403 or any(p in description.lower() for p in _GONE_PHRASES):
            raise ChatGone(f"{status} {description}")
        raise TelegramError(f"telegram {method} refused: {status} {description}")
