"""The Bot API client's retry policy, against the loopback fake Bot API (a real HTTP server).

Waits are recorded by a stop event whose ``wait`` returns at once, so the policy is checked
exactly and fast; one test also honours a real ``retry_after`` on the wall clock.
"""
from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from offload.gateway.platform import ChatGone, SendFailed
from offload.gateway.telegram.client import TelegramAuthError, TelegramClient, TelegramError
from offload.gateway.telegram.fake_api import FakeBotApi

pytestmark = pytest.mark.timeout(30)
TOKEN = "123:fake-token"


class RecordedWaits(threading.Event):
    """A stop event that never blocks: it records each wait the client asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        return self.is_set()


@pytest.fixture
def api():
    with FakeBotApi(TOKEN) as fake:
        yield fake


@pytest.fixture
def waits() -> RecordedWaits:
    return RecordedWaits()


@pytest.fixture
def client(api, waits):
    c = TelegramClient(api.url, TOKEN, max_attempts=5, backoff_s=0.5, max_wait_s=30.0, stop=waits)
    yield c
    c.close()


def send(client: TelegramClient, chat: int = 7, text: str = "hi"):
    return client.call("sendMessage", {"chat_id": chat, "text": text})


def test_a_429_waits_exactly_the_retry_after_telegram_asks_for(api, client, waits):
    api.fail("sendMessage", 429, times=2, retry_after=3)
    result = send(client)
    assert waits.waits == [3.0, 3.0]
    assert api.calls == ["sendMessage"] * 3
    assert [m.text for m in api.messages(7)] == ["hi"] and result["message_id"] == api.messages(7)[0].message_id


def test_a_long_retry_after_is_capped(api, client, waits):
    api.fail("sendMessage", 429, retry_after=600)
    send(client)
    assert waits.waits == [30.0]


def test_retry_after_is_honoured_on_the_wall_clock(api):
    api.fail("sendMessage", 429, retry_after=1)
    real = TelegramClient(api.url, TOKEN, max_attempts=3)
    try:
        started = time.monotonic()
        send(real)
        assert time.monotonic() - started >= 1.0
    finally:
        real.close()
    assert len(api.messages(7)) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 409])
def test_5xx_and_409_retry_with_exponential_backoff(api, client, waits, status):
    api.fail("sendMessage", status, times=3)
    send(client)
    assert waits.waits == [0.5, 1.0, 2.0]
    assert len(api.messages(7)) == 1


def test_the_attempt_budget_runs_out_as_send_failed(api, client, waits):
    api.fail("sendMessage", 500, times=10)
    with pytest.raises(SendFailed, match="after 5 attempts: 500"):
        send(client)
    assert len(api.calls) == 5 and api.messages(7) == []
    assert waits.waits == [0.5, 1.0, 2.0, 4.0]  # and no wait after the last attempt


def test_network_errors_retry_then_fail_without_quoting_the_token(waits):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = TelegramClient(f"http://127.0.0.1:{port}", TOKEN, max_attempts=3, backoff_s=0.5, stop=waits)
    with pytest.raises(SendFailed) as err:
        send(c)
    c.close()
    assert "network error" in str(err.value) and TOKEN not in str(err.value)
    assert waits.waits == [0.5, 1.0]  # no wait after the last attempt


def test_a_set_stop_event_ends_the_retries_at_once(api, client, waits):
    api.fail("sendMessage", 500, times=10)
    waits.set()
    with pytest.raises(SendFailed):
        send(client)
    assert len(api.calls) == 1


def test_a_blocked_bot_is_chat_gone_at_once(api, client, waits):
    api.block(7)
    with pytest.raises(ChatGone, match="403 Forbidden: bot was blocked"):
        send(client)
    assert waits.waits == [] and api.calls == ["sendMessage"]


def test_chat_not_found_is_chat_gone_at_once(api, client, waits):
    api.delete_chat(7)
    with pytest.raises(ChatGone, match="400 Bad Request: chat not found"):
        send(client)
    assert waits.waits == []


def test_another_400_is_a_telegram_error_not_retried(api, client, waits):
    with pytest.raises(TelegramError, match="can't parse entities"):
        client.call("sendMessage", {"chat_id": 7, "text": "<i>x</i>", "parse_mode": "HTML"})
    assert waits.waits == [] and api.calls == ["sendMessage"]


def test_a_wrong_token_names_the_fix_and_never_the_token(api, waits, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "999:wrong-secret"
    c = TelegramClient(api.url, wrong, stop=waits)
    with pytest.raises(TelegramAuthError, match="gateway.telegram.token_env") as err:
        send(c)
    c.close()
    assert wrong not in str(err.value) and wrong not in caplog.text


def test_the_token_never_reaches_the_log(api, client, caplog):
    caplog.set_level(logging.DEBUG)
    api.fail("sendMessage", 502)
    api.fail("sendMessage", 429, retry_after=1)
    send(client)
    assert "retrying" in caplog.text
    assert TOKEN not in caplog.text
