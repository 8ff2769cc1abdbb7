"""A queued unit stopped from the dashboard, in headless Chromium (issue 29 item 3: queued units
shown and stoppable in every view): a chat at capacity queues its second delegation; the
dashboard (its own process, on the same home) lists it as queued on the overview, and its page
offers "stop" instead of ack/drop; pressing it takes the unit from the queue, the chat gets it
as interrupted and it never runs; the first unit then finishes normally."""
from __future__ import annotations

import threading

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.dashboard.conftest import browser, sign_in  # noqa: F401 - fixture
from tests.e2e.conftest import open_dashboard
from tests.e2e.test_admission_queue_e2e import (agents_json, at_capacity, gated_child, stopped_one_never_ran,
                                                two_calls_parent)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.timeout(150)]
WAIT_S = 30


def test_a_queued_unit_is_listed_and_stopped_from_the_dashboard_and_never_runs(
        cli, model_server, write_config, browser):  # noqa: F811
    release = threading.Event()
    server = model_server(two_calls_parent(gated_child(release)))
    chat, _sid, first, second = at_capacity(cli, server, write_config)
    try:
        board = open_dashboard(cli)
        url = board.url
        sign_in(browser, board.login_url)  # as a person opens the address it printed
        browser.get(url + "/")
        assert browser.find_element(By.ID, f"unit-{second}").get_attribute("data-status") == "queued"
        assert browser.find_element(By.CSS_SELECTOR, "#counter-queued").get_attribute("data-value") == "1"
        browser.find_element(By.ID, f"open-{second}").click()
        assert browser.find_element(By.ID, "status").text == "queued"
        assert not browser.find_elements(By.ID, "ack") and not browser.find_elements(By.ID, "drop")
        stop = browser.find_element(By.ID, "interrupt")
        assert stop.text == "stop (it never starts)"
        stop.click()
        WebDriverWait(browser, WAIT_S).until(EC.presence_of_element_located((By.ID, "message")))
        assert f"stopped {second} before it started" in browser.find_element(By.ID, "message").text
        WebDriverWait(browser, WAIT_S).until(lambda b: b.find_element(By.ID, "status").text == "interrupted")
        assert not browser.find_elements(By.ID, "interrupt")
        chat.wait_for(rf"background result {second} landed \(from another process\): Subagent Task Interrupted")
        browser.get(url + "/")
        assert browser.find_element(By.CSS_SELECTOR, "#counter-queued").get_attribute("data-value") == "0"
    finally:
        release.set()
    assert "slow survey of the repo" in stopped_one_never_ran(chat, server, first)
    states = {r["id"]: r["state"] for r in agents_json()["recent"]}
    assert states[second] == "interrupted" and states[first] == "completed"
