"""``offload gateway`` resumes a result too long for one message from its first part not shown
(issue 27): after a send that failed partway, and after the gateway was killed between showing
part of a result and storing its turn -- the restarted gateway takes the dead gateway's claim
at once (its pid is gone), not after the 5-minute claim lease, and never repeats a part the
chat already has."""
from __future__ import annotations

import time

import pytest

from offload.gateway.telegram.fake_api import FakeBotApi
from offload.testing.model_server import text_reply
from tests.e2e.gateway_harness import DM, TOKEN, chat_parent, result_headers, visible, write_gateway_config
from tools.async_delegation import get_durable_delegation

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
LINES = [f"line {n:03d} " + "x" * 90 for n in range(105)]  # ~10,500 characters: three messages
PART_TWO = "line 050 "  # a line in the second message


@pytest.fixture
def api():
    with FakeBotApi(TOKEN) as fake:
        yield fake


@pytest.fixture
def gateway(cli, monkeypatch, _isolated_hermes_home, workspace, model_server, api):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    server = model_server(chat_parent(lambda text: {"goal": "long report"}, lambda r: text_reply("\n".join(LINES))))
    write_gateway_config(_isolated_hermes_home, workspace, server, api)

    def start():
        proc = cli("gateway", "-v")
        proc.wait_for(r"offload gateway: serving 2 allowed Telegram chat")
        return proc
    return start


def times_shown(api: FakeBotApi) -> dict[str, int]:
    """How often each line of the result reached the chat."""
    text = "\n".join(visible(m) for m in api.messages(DM))
    return {line: text.count(line) for line in LINES}


def result_id(api: FakeBotApi) -> str:
    [header] = result_headers(api, DM)
    return header.split()[2]


def test_a_send_that_fails_at_the_second_part_is_retried_from_the_second_part(api, gateway):
    api.fail("sendMessage", 500, times=4, when=lambda body: PART_TWO in body.get("text", ""))  # every client attempt
    proc = gateway()
    api.user_says(DM, "report")
    assert api.wait_until(lambda: "Result noted." in "\n".join(visible(m) for m in api.messages(DM)), 60), proc.output
    assert set(times_shown(api).values()) == {1}, "a part of the result was shown twice or never"
    assert "retrying later" in proc.output  # it did fail once, after part one
    assert get_durable_delegation(result_id(api))["delivery_state"] == "delivered"


def test_a_gateway_killed_between_showing_part_of_a_result_and_storing_its_turn(api, gateway):
    api.fail("sendMessage", 429, retry_after=30, when=lambda body: PART_TWO in body.get("text", ""))
    first = gateway()
    api.user_says(DM, "report")
    first.wait_for(r"telegram sendMessage: 429 rate limited", timeout_s=60)  # part one shown, part two waits
    did = result_id(api)
    assert get_durable_delegation(did)["delivery_progress"] == 1
    first.kill()  # SIGKILL while it holds the claim
    killed_at = time.monotonic()

    second = gateway()
    assert api.wait_until(lambda: "Result noted." in "\n".join(visible(m) for m in api.messages(DM)), 60), \
        second.output
    assert time.monotonic() - killed_at < 30  # the claim lease is 300 s: the dead holder's claim was released
    assert set(times_shown(api).values()) == {1}, "a part of the result was shown twice or never"
    row = get_durable_delegation(did)
    assert (row["delivery_state"], row["delivery_attempts"]) == ("delivered", 2)
