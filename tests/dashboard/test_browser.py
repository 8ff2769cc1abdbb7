"""The dashboard in real headless Chromium: live roster over server-sent events, the
interrupt button, escaping of child output, and signing in with the token (per-port cookies)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.engine.conftest import wait_event

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]
WAIT_S = 20


def _status(browser, delegation_id: str) -> str | None:
    return browser.execute_script(
        "var u = document.getElementById(arguments[0]); return u ? u.dataset.status : null;", f"unit-{delegation_id}")


def _children(browser, delegation_id: str) -> list[list[str]]:
    """[status, text] of each child row, read in one go: the live roster is swapped often."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#' + arguments[0] + ' tr.child'))"
        ".map(function (r) { return [r.dataset.status, r.textContent]; });", f"unit-{delegation_id}")


def _save_screenshot(browser) -> None:
    """CI exports OFFLOAD_DASHBOARD_SCREENSHOT (bench/results/dashboard-roster.png): an artefact."""
    target = os.environ.get("OFFLOAD_DASHBOARD_SCREENSHOT")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(target), f"could not write {target}"


def test_fan_out_appears_live_and_turns_completed(browser, dashboard, held):
    server = dashboard()
    browser.get(server.url + "/")
    WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.ID, "live-state"), "live"))
    browser.execute_script("window.__sameDocument = 'yes';")  # gone if the page reloads

    unit = held(["count the files in src", "summarise README.md", "list open TODOs"])
    WebDriverWait(browser, WAIT_S).until(lambda b: _status(b, unit.delegation_id) == "running")
    children = _children(browser, unit.delegation_id)
    assert [status for status, _ in children] == ["running"] * 3
    assert "tool terminal" in children[0][1]  # live activity of this process's unit
    _save_screenshot(browser)

    unit.finish()
    WebDriverWait(browser, WAIT_S).until(lambda b: _status(b, unit.delegation_id) == "completed")
    assert [status for status, _ in _children(browser, unit.delegation_id)] == ["completed"] * 3
    assert browser.execute_script("return window.__sameDocument;") == "yes"


def test_activity_of_a_unit_another_process_runs_updates_live(browser, dashboard):
    from tests.dashboard.test_activity import OtherOwner

    server = dashboard()
    browser.get(server.url + "/")
    WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.ID, "live-state"), "live"))
    browser.execute_script("window.__sameDocument = 'yes';")  # gone if the page reloads
    owner = OtherOwner()  # its own process: this dashboard knows its unit only through the ledger
    try:
        WebDriverWait(browser, WAIT_S).until(lambda b: "tool web_search" in str(_children(b, owner.delegation_id)))
        [first, second] = _children(browser, owner.delegation_id)
        assert "api calls 2" in first[1] and "api calls 7" in second[1]
        assert browser.execute_script(
            "return document.querySelector('#unit-' + arguments[0] + ' .snapshot-age') !== null;", owner.delegation_id)
        owner.say("next", "NEXT")
        WebDriverWait(browser, WAIT_S).until(lambda b: "tool terminal" in str(_children(b, owner.delegation_id)))
        assert "api calls 5" in _children(browser, owner.delegation_id)[0][1]
        assert owner.finish() == 0
        WebDriverWait(browser, WAIT_S).until(lambda b: _status(b, owner.delegation_id) == "completed")
        assert browser.execute_script("return window.__sameDocument;") == "yes"
    finally:
        owner.kill()


def test_interrupt_clicked_on_the_page_stops_the_child(browser, dashboard, held):
    server = dashboard()
    unit = held(["run forever"])
    browser.get(f"{server.url}/d/{unit.delegation_id}")
    browser.find_element(By.ID, "interrupt").click()
    WebDriverWait(browser, WAIT_S).until(EC.presence_of_element_located((By.ID, "message")))
    assert "interrupt sent" in browser.find_element(By.ID, "message").text
    assert unit.interrupted.is_set()  # the engine's interrupt_fn reached the child
    event = wait_event(unit.delegation_id, bus=unit.runtime.bus)
    assert event["results"][0]["status"] == "interrupted"
    browser.refresh()
    assert browser.find_element(By.ID, "status").text == "interrupted"  # stopped: not "error", never "completed"
    assert not browser.find_elements(By.ID, "interrupt")  # nothing left to interrupt


def test_script_in_child_output_renders_as_text(browser, dashboard, held):
    server = dashboard()
    hostile = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
    unit = held([f"task {hostile}"], [hostile])
    unit.finish()
    browser.get(f"{server.url}/d/{unit.delegation_id}")
    assert browser.find_element(By.CSS_SELECTOR, "pre.summary").text == hostile
    assert hostile in browser.find_element(By.ID, "agent-text").text
    browser.get(server.url + "/")
    WebDriverWait(browser, WAIT_S).until(lambda b: _status(b, unit.delegation_id) is not None)
    assert hostile in _children(browser, unit.delegation_id)[0][1]
    assert browser.execute_script("return window.__pwned === undefined;")


def test_the_address_with_the_token_signs_in_per_port_and_its_buttons_work(browser, dashboard, held):
    first, second = "first-dashboard-token-0123456789abcdef", "second-dashboard-token-0123456789abcdef"
    one, two = dashboard(token=first, signed_in=False), dashboard(token=second, signed_in=False)
    browser.get(one.url + "/")
    assert "token needed" in browser.title and "offload token show" in browser.find_element(By.TAG_NAME, "body").text
    for server in (one, two):
        browser.get(server.login_url)
        assert "token" not in browser.current_url  # dropped from the address bar
    cookies = {c["name"]: c for c in browser.get_cookies()}
    ports = [server.url.rsplit(":", 1)[1] for server in (one, two)]
    assert sorted(cookies) == sorted(f"offload_dashboard_{p}" for p in ports)  # one per port: neither clobbered
    assert all(c["httpOnly"] and c["value"] not in (first, second) for c in cookies.values())
    unit = held(["stop me from the page"])
    for server in (one, two):  # both still signed in
        browser.get(server.url + "/")
        WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.ID, "live-state"), "live"))
        WebDriverWait(browser, WAIT_S).until(lambda b: _status(b, unit.delegation_id) == "running")
    browser.get(f"{one.url}/d/{unit.delegation_id}")
    browser.find_element(By.ID, "interrupt").click()  # a POST with the page's own Origin and the cookie
    WebDriverWait(browser, WAIT_S).until(EC.presence_of_element_located((By.ID, "message")))
    assert "interrupt sent" in browser.find_element(By.ID, "message").text and unit.interrupted.is_set()
