"""``TelegramPlatform`` against the loopback fake Bot API: updates to ``Incoming`` messages,
the offset persisted only after handling (a restart neither replays nor skips), and sends
split and routed to the right chat and forum topic."""
from __future__ import annotations

import threading
import time

import pytest

from offload.gateway.platform import Incoming, Route, session_key
from offload.gateway.state import GatewayState, GatewayStateError
from offload.gateway.telegram.adapter import TelegramPlatform
from offload.gateway.telegram.client import TelegramClient
from offload.gateway.telegram.fake_api import FakeBotApi, parse_html

pytestmark = pytest.mark.timeout(30)
TOKEN = "123:fake-token"


@pytest.fixture
def api():
    with FakeBotApi(TOKEN) as fake:
        yield fake


def platform_for(api: FakeBotApi, tmp_path) -> TelegramPlatform:
    return TelegramPlatform(TelegramClient(api.url, TOKEN, max_attempts=2, backoff_s=0.01),
                            GatewayState("telegram", tmp_path))


def poll_all(platform: TelegramPlatform, timeout_s: float = 0) -> list[Incoming]:
    got: list[Incoming] = []
    platform.poll(timeout_s, got.append)
    return got


def test_dm_group_and_forum_topic_map_to_their_session_keys(api, tmp_path):
    api.user_says(7, "in a dm")
    api.user_says(-100, "in the group", chat_type="supergroup")
    api.user_says(-100, "in a topic", chat_type="supergroup", thread_id=55)
    dm, group, topic = poll_all(platform_for(api, tmp_path))
    assert (dm.text, dm.chat_type, dm.route) == ("in a dm", "dm", Route("7"))
    assert session_key("telegram", dm) == "agent:main:telegram:dm:7"
    assert session_key("telegram", group) == "agent:main:telegram:group:-100"
    assert session_key("telegram", topic) == "agent:main:telegram:thread:-100:55"
    assert topic.route == Route("-100", "55")


def test_a_reply_chain_outside_a_forum_is_not_a_thread(api, tmp_path):
    api.user_says(-100, "reply", chat_type="supergroup", thread_id=9)
    with api._cond:  # a plain reply carries message_thread_id without is_topic_message
        api._updates[-1]["message"].pop("is_topic_message")
    [msg] = poll_all(platform_for(api, tmp_path))
    assert msg.chat_type == "group" and msg.route == Route("-100")


def test_a_restart_neither_replays_nor_skips_updates(api, tmp_path):
    api.user_says(7, "one")
    assert [m.text for m in poll_all(platform_for(api, tmp_path))] == ["one"]
    api.user_says(7, "two")
    restarted = platform_for(api, tmp_path)  # a new process: same state file, new client
    assert [m.text for m in poll_all(restarted)] == ["two"]
    assert poll_all(restarted) == []


def test_an_update_whose_handling_crashed_is_handed_over_again(api, tmp_path):
    api.user_says(7, "one")
    platform = platform_for(api, tmp_path)

    def crash(message: Incoming) -> None:
        raise RuntimeError("the process died here")
    with pytest.raises(RuntimeError):
        platform.poll(0, crash)
    assert [m.text for m in poll_all(platform_for(api, tmp_path))] == ["one"]


def test_non_text_updates_are_skipped_but_confirmed(api, tmp_path):
    api.user_says(7, "text")
    with api._cond:
        api._updates[-1]["message"].pop("text")  # a sticker
    platform = platform_for(api, tmp_path)
    assert poll_all(platform) == []
    assert GatewayState("telegram", tmp_path).read()["offset"] == 2


def test_a_long_poll_returns_as_soon_as_a_message_arrives(api, tmp_path):
    platform = platform_for(api, tmp_path)
    got: list[Incoming] = []
    poller = threading.Thread(target=platform.poll, args=(20, got.append))
    started = time.monotonic()
    poller.start()
    api.wait_until(lambda: "getUpdates" in api.calls)
    api.user_says(7, "wake up")
    poller.join(10)
    assert [m.text for m in got] == ["wake up"] and time.monotonic() - started < 10


def test_send_splits_a_long_result_and_keeps_the_topic(api, tmp_path):
    platform = platform_for(api, tmp_path)
    body = "\n".join(f"{n:05d} " + "<&>" * 30 for n in range(200))
    ids = platform.send(Route("-100", "55"), body, header="Background result deleg_1 (completed)")
    sent = api.messages(-100, 55)
    assert len(ids) == len(sent) >= 2 and ids == [str(m.message_id) for m in sent]
    shown = "\n".join(parse_html(m.text)[0] for m in sent)
    assert shown == "Background result deleg_1 (completed)\n" + body


def test_edit_replaces_the_text_and_ignores_not_modified(api, tmp_path):
    platform = platform_for(api, tmp_path)
    [mid] = platform.send(Route("7"), "first")
    platform.edit(Route("7"), mid, "second")
    platform.edit(Route("7"), mid, "second")  # Telegram answers 400 "not modified": not an error
    [msg] = api.messages(7)
    assert msg.edits == ["second"]


def test_a_corrupt_state_file_names_the_file_and_the_fix(api, tmp_path):
    (tmp_path / "telegram-state.json").write_text("{not json")
    with pytest.raises(GatewayStateError, match="telegram-state.json is not valid JSON.*delete it"):
        poll_all(platform_for(api, tmp_path))


def test_inline_buttons_go_under_the_last_part_and_a_press_comes_back_answered(api, tmp_path):
    platform = platform_for(api, tmp_path)
    platform.send(Route("-100", "55"), "x" * 5000, header="Approval needed",
                  buttons=[("Approve", "apr:apr_1:allow"), ("Deny", "apr:apr_1:deny")])
    *earlier, last = api.messages(-100)
    assert earlier and all(m.buttons == [] for m in earlier) and last.buttons == [("Approve", "apr:apr_1:allow"), ("Deny", "apr:apr_1:deny")]
    press_id = api.press(last, "apr:apr_1:deny", user_id=9, chat_type="supergroup")
    [press] = poll_all(platform)
    assert (press.button, press.press_id, press.message_id, press.text) == (
        "apr:apr_1:deny", press_id, str(last.message_id), "")
    assert (press.route, press.chat_type, press.user_id) == (Route("-100", "55"), "thread", "9")
    platform.answer_button(press.press_id, "Denied")
    assert api.answered == {press_id: "Denied"}
    platform.edit(Route("-100", "55"), str(last.message_id), "denied by telegram:u", header="Approval needed")
    assert last.buttons == []  # an edit without a keyboard takes the buttons away, as in Telegram
