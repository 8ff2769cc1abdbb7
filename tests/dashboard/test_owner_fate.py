"""The dashboard tells an owner that exited normally from one that died (issue 26, item 5):
every `offload run` exits when its work is done, and that is not "(dead)"."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from typing import Callable, Iterator

import pytest

from offload.testing.demo_script import CRASH_PROMPT
from tests.dashboard.conftest import Served, serve_cli_dashboard, sign_in
from tests.e2e.conftest import cli_env, offload

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dashboard_url(request) -> Iterator[Served]:
    """``offload dashboard`` on this test's home; the test's browser (if any) signed in."""
    for served in serve_cli_dashboard(env=cli_env()):
        if "browser" in request.fixturenames:
            sign_in(request.getfixturevalue("browser"), served.login_url)
        yield served


def _killed_mid_run(env: dict[str, str] | None = None, ready: Callable[[dict], bool] = lambda row: True) -> str:
    """An `offload run` (with ``env``) SIGKILLed while its slow child still runs, once its
    running row satisfies ``ready``; its delegation id."""
    proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "--demo-model", CRASH_PROMPT],
                            env=env or cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            running = json.loads(offload("agents", "--json", HERMES_HOME=(env or cli_env())["HERMES_HOME"]).stdout)["running"]
            if running and ready(running[0]):
                return running[0]["id"]
            time.sleep(0.1)
        raise AssertionError("the run never showed a running delegation (ready as asked)")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(15)


def _owner_cell(html: str, delegation_id: str) -> str:
    row = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*{delegation_id}(?:(?!</tr>).)*</tr>", html, re.S)
    assert row, html
    return row.group(0)


def test_an_owner_that_exited_normally_is_not_called_dead_and_a_killed_one_is_said_to_have_died(dashboard_url):
    done = offload("run", "--demo-model", "compare the formats")
    assert done.returncode == 0, done
    finished = json.loads(offload("inbox", "--all", "--json").stdout)["settled"][0]["id"]
    died = _killed_mid_run()
    history = dashboard_url.get("/history").text
    assert "(exited)" in _owner_cell(history, finished) and "dead" not in _owner_cell(history, finished)
    assert "(died)" in _owner_cell(history, died)
    assert "exited after the unit finished" in dashboard_url.get(f"/d/{finished}").text
    assert "died before the unit finished" in dashboard_url.get(f"/d/{died}").text
