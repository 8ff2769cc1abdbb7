"""Approving a subagent's risky command from the dashboard, in headless Chromium (issue 29
item 2: "dashboard button"): ``offload run --ask-approvals`` has a child waiting on ``ask``;
``offload dashboard`` on the same home shows the request on the overview as it arrives (a live
part of its own) and on the delegation's page, each with Approve / Deny; Approve on the
delegation's page lets the child run its command, which the run's result and tool trace say."""
from __future__ import annotations

import json
import socket

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from offload.testing.model_server import ScriptedModelServer
from tests.dashboard.conftest import browser, sign_in  # noqa: F401 - fixture
from tests.e2e.conftest import open_dashboard, scripted_parent
from tests.e2e.test_approvals_e2e import REMOVE, _child_runs, _child_tool_results, _setup, _trace_step

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.timeout(150)]
WAIT_S = 30


def _shown(browser) -> list[list[str]]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('li.approval')).map(function (li) {"
        " return [li.dataset.request, li.dataset.delegation, li.querySelector('code.command').textContent]; });")


def test_a_child_waiting_on_ask_is_allowed_from_the_dashboard(_isolated_hermes_home, tmp_path, cli, browser):  # noqa: F811
    with ScriptedModelServer(scripted_parent(child=_child_runs(REMOVE), delegate={"goal": "clean"})) as server:
        _setup(_isolated_hermes_home, server, tmp_path / "ws", approvals="ask")
        board = open_dashboard(cli)
        url = board.url
        sign_in(browser, board.login_url)  # as a person opens the address it printed
        browser.get(url + "/")
        WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.ID, "live-state"), "live"))
        assert _shown(browser) == []
        run = cli("run", "--json", "--ask-approvals", "clean the build")
        WebDriverWait(browser, WAIT_S).until(lambda b: _shown(b))  # arrives live, no reload
        [[request_id, delegation_id, command]] = _shown(browser)
        assert command == REMOVE["command"] and "destructive" in browser.find_element(
            By.CSS_SELECTOR, f"#approval-{request_id} .categories").text

        browser.get(f"{url}/d/{delegation_id}")
        assert _shown(browser) == [[request_id, delegation_id, command]]
        assert run.proc.poll() is None  # the child still waits
        browser.find_element(By.ID, f"allow-{request_id}").click()
        WebDriverWait(browser, WAIT_S).until(EC.presence_of_element_located((By.ID, "message")))
        assert browser.current_url.split("?")[0] == f"{url}/d/{delegation_id}"
        assert f"allowed {REMOVE['command']} ({request_id})" in browser.find_element(By.ID, "message").text
        assert _shown(browser) == []
        assert run.finish() == 0, run.output
        [output] = _child_tool_results(server)
    by = f"dashboard@{socket.gethostname()}"
    assert output.startswith(f"[approved by {by} (request {request_id})]\nexit code: 0"), output
    assert not (tmp_path / "ws" / "build").exists()  # the command ran
    step = _trace_step(json.loads(run.output[run.output.index("{\n"):]))
    assert step["approval"] == {"request_id": request_id, "categories": ["destructive"], "decision": "allowed",
                                "by": by}
