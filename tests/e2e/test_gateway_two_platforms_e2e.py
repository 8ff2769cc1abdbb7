"""One ``offload gateway`` process serving Telegram (the loopback fake Bot API) and Matrix (a real
Synapse) together, each result going back to the platform and chat it came from; and
Telegram's per-user allow-list (``gateway.telegram.allowed_user_ids``)."""
from __future__ import annotations

import pytest
import yaml

from tests.e2e.gateway_harness import DM, GROUP, TOKEN, chat_parent, echo_goal, result_headers, shown, visible
from tests.e2e.test_gateway_e2e import api, stop, wait_shown  # noqa: F401 - fixtures
from tests.e2e.test_gateway_matrix_e2e import bot_text, people, room_with_bot, synapse, wait_said  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def write_config(home, workspace, server, gateway: dict) -> None:
    data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "delegation"], "delegation": {},
            "gateway": {"retry_backoff_s": 0.2, **gateway}}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def test_telegram_and_matrix_in_one_process_each_get_their_own_results(
        _isolated_hermes_home, workspace, model_server, api, synapse, people, cli, monkeypatch):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", people["bot"].token)
    server = model_server(chat_parent(lambda text: {"goal": f"{text}-job"}, echo_goal))
    write_config(_isolated_hermes_home, workspace, server, {
        "telegram": {"base_url": api.url, "allowed_chat_ids": [DM], "poll_timeout_s": 1},
        "matrix": {"homeserver": synapse.url, "user_id": people["bot"].user_id,
                   "allowed_user_ids": [people["alice"].user_id], "poll_timeout_s": 1}})
    gateway = cli("gateway", "-v")
    gateway.wait_for(r"serving 1 allowed Telegram chat")
    gateway.wait_for(r"serving Matrix as @bot")
    room = room_with_bot(people)
    api.user_says(DM, "telegram")
    people["alice"].say(room, "matrix")
    wait_shown(api, DM, "result of telegram-job")
    wait_said(people, room, "result of matrix-job")
    wait_shown(api, DM, "Result noted.")
    wait_said(people, room, "Result noted.")
    assert "matrix" not in shown(api, DM) and "telegram-job" not in bot_text(people, room)
    stop(gateway)
    assert TOKEN not in gateway.output and people["bot"].token not in gateway.output


def test_telegram_serves_only_the_allowed_users_of_an_allowed_chat(
        _isolated_hermes_home, workspace, model_server, api, cli, monkeypatch):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    server = model_server(chat_parent(lambda text: {"goal": text}, echo_goal))
    write_config(_isolated_hermes_home, workspace, server, {
        "telegram": {"base_url": api.url, "allowed_chat_ids": [GROUP], "allowed_user_ids": [42],
                     "poll_timeout_s": 1}})
    gateway = cli("gateway", "-v")
    gateway.wait_for(r"serving 1 allowed Telegram chat")
    api.user_says(GROUP, "run this", chat_type="supergroup", user_id=666)
    api.user_says(GROUP, "and this", chat_type="supergroup", user_id=666)
    api.user_says(GROUP, "alpha", chat_type="supergroup", user_id=42)
    wait_shown(api, GROUP, "result of alpha")
    [refusal] = [visible(m) for m in api.messages(GROUP) if "666" in visible(m)]
    assert "answers only the users its owner allowed" in refusal and "gateway.telegram.allowed_user_ids" in refusal
    assert len(result_headers(api, GROUP)) == 1
    assert not any("run this" in str(r["messages"]) or "and this" in str(r["messages"]) for r in server.requests)
    stop(gateway)
