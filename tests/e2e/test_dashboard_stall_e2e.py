"""A stalled child of a real run, drawn by the dashboard in headless Chromium (issue 30: the
timeline against real runs): ``offload chat`` delegates to a model-backed child that hangs
mid-stream; the stall loop's warning interrupts it, and the child, which honours an interrupt
at its next chunk, stops within the grace; ``offload dashboard`` (its own process, on the same
home) draws the unit's page with the stall warning, the grace and the finish, the unit and its
child interrupted (``stalled`` is kept for a unit given up after the grace: tests/dashboard/
test_delegation_page.py holds a child that never answers)."""
from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from offload.testing.model_server import hang_reply, text_reply
from tests.dashboard.conftest import browser, sign_in  # noqa: F401 - fixture
from tests.dashboard.test_delegation_page import _lanes
from tests.e2e.conftest import delegating_chat, open_dashboard, scripted_parent

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.timeout(120)]


def test_a_real_childs_stall_is_drawn_with_its_warning_grace_and_interrupt(
        cli, model_server, write_config, browser):  # noqa: F811
    server = model_server(scripted_parent(child=lambda r: hang_reply("reading the build log…"),
                                          delegate={"goal": "summarise the build log"},
                                          on_result=text_reply("The subagent stalled; I will retry later.")))
    write_config(server, stall_idle_seconds=1, stall_grace_seconds=1, stall_check_interval_seconds=0.2)
    chat, did = delegating_chat(cli, started=False)
    chat.wait_for(rf"background result {did} landed: Subagent Task Interrupted")
    board = open_dashboard(cli)
    url = board.url
    sign_in(browser, board.login_url)  # as a person opens the address it printed
    browser.get(f"{url}/d/{did}")
    unit_lane, child, delivery = _lanes(browser)
    assert unit_lane["state"] == "interrupted", unit_lane
    assert unit_lane["marks"] == ["stall", "finish"] and unit_lane["grace"] == 1
    assert child["label"].startswith("#1") and child["state"] == "interrupted" and child["bar"] > 0, child
    assert delivery["label"].startswith("delivery")
    assert "summarise the build log" in browser.find_element(By.CSS_SELECTOR, "main").text


def test_the_overview_counts_a_stall_as_stalled_and_a_users_stop_as_no_failure(
        cli, model_server, write_config, browser):  # noqa: F811
    """Issue 41: a child interrupted by the stall monitor ends ``interrupted`` (stop_reason
    ``stall``): the "stalled" counter counts it; one a user stopped is named, not counted as failed."""
    from tests.e2e.conftest import HANDLE_RE, offload

    server = model_server(scripted_parent(child=lambda r: hang_reply("reading the build log…"),
                                          delegate={"goal": "summarise the build log"},
                                          on_result=text_reply("Noted.")))
    write_config(server, stall_idle_seconds=1, stall_grace_seconds=5, stall_check_interval_seconds=0.2)
    stalled = cli("run", "go")
    assert stalled.finish(timeout_s=90) == 7, stalled.output
    write_config(server)  # no stall within the test: this one is stopped by a user
    stopped = cli("run", "go")
    did = stopped.wait_for(HANDLE_RE).group(1)
    assert offload("stop", did).returncode == 0
    assert stopped.finish(timeout_s=60) == 7, stopped.output

    board = open_dashboard(cli)
    sign_in(browser, board.login_url)  # as a person opens the address it printed
    browser.get(f"{board.url}/")
    counter = {key: browser.find_element(By.ID, f"counter-{key}") for key in ("stalled", "failed")}
    assert counter["stalled"].get_attribute("data-value") == "1"
    assert counter["failed"].get_attribute("data-value") == "0"
    assert "not counted: 1 stopped by a user" in counter["failed"].text
