"""Pairing a new Telegram chat (issue 26, item 10): the gateway starts with an empty allow-list,
serves nobody, answers each chat that writes with its id and the command that allows it, and
the owner's console prints that command; once it is run, the chat is served after a restart."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
import yaml

from offload.home import config_path
from tests.e2e.conftest import cli_env
from tests.e2e.gateway_harness import TOKEN, chat_parent, echo_goal, shown, visible
from tests.e2e.test_gateway_e2e import api, configure, stop, wait_shown  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

MINE = 4242


def _allow_list(ids: list[int]) -> None:
    data = yaml.safe_load(config_path().read_text())
    data["gateway"]["telegram"]["allowed_chat_ids"] = ids
    config_path().write_text(yaml.safe_dump(data))


def test_an_empty_allow_list_starts_in_pairing_and_the_printed_command_allows_the_chat(api, configure, cli,
                                                                                     monkeypatch):
    server = configure(chat_parent(lambda text: {"goal": f"{text}-job"}, echo_goal))
    _allow_list([])
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    gateway = cli("gateway")
    gateway.wait_for(r"no chat is allowed yet, so none is served")
    api.user_says(MINE, "hello bot")
    line = gateway.wait_for(r"chat 4242 wrote, but it is not allowed; to serve it run: (offload config set .*) and "
                            r"restart the gateway").group(1)
    assert api.wait_until(lambda: api.messages(MINE), 30)
    [answer] = [visible(m) for m in api.messages(MINE)]
    assert "Its chat id is 4242" in answer and "offload config set gateway.telegram.allowed_chat_ids" in answer
    assert not any("hello bot" in str(r["messages"]) for r in server.requests)  # nothing ran for it
    stop(gateway)

    allowed = subprocess.run([sys.executable, "-m", "offload", *shlex.split(line)[1:]], capture_output=True,
                             text=True, env=cli_env(), timeout=60)
    assert allowed.returncode == 0, allowed
    served = cli("gateway")
    served.wait_for(r"serving 1 allowed Telegram chat")
    api.user_says(MINE, "alpha")
    wait_shown(api, MINE, "result of alpha-job")
    stop(served)
    assert TOKEN not in gateway.output + served.output
