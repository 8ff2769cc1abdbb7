"""Rows from the keyboard, in headless Chromium: j / k move the focus along the rows of the
overview, the history and a session's page (the focused row is marked, not only its link),
Enter opens the row's delegation, and on the live overview the focus stays on its row while
the roster is swapped under it."""
from __future__ import annotations

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]
WAIT_S = 20
_FOCUSED_ROW = """var a = document.activeElement, tr = a && a.closest('tr');
return tr ? [a.className, a.getAttribute('href'), getComputedStyle(tr.cells[2]).backgroundColor] : null;"""


def _press(browser, *keys: str) -> None:
    """Keys typed to whatever has the focus, as a person types: no element is held, so a live
    swap of the roster between two keys cannot leave the test holding a replaced element."""
    for key in keys:
        ActionChains(browser).send_keys(key).perform()


def _focused(browser) -> tuple[str, str] | None:
    found = browser.execute_script(_FOCUSED_ROW)
    return None if found is None else (found[0], found[1].rsplit("/", 1)[-1], found[2])


def _background(browser) -> str:
    return browser.execute_script("return getComputedStyle(document.body).backgroundColor;")


def test_j_and_k_walk_the_history_and_a_session_and_enter_opens_a_row(browser, dashboard, held):
    units = [held([f"task {n}"]) for n in range(3)]
    for unit in units:
        unit.finish()
    newest_first = [u.delegation_id for u in reversed(units)]
    server = dashboard()
    for page in ("/history", "/s/sess-1"):
        browser.get(server.url + page)
        _press(browser, "j")
        first = _focused(browser)
        assert first[:2] == ("open-row", newest_first[0]), page
        assert first[2] != _background(browser)  # the whole row is marked
        _press(browser, "j", "j", "j")  # past the last row the focus stays on it
        assert _focused(browser)[1] == newest_first[2]
        _press(browser, "k")
        assert _focused(browser)[1] == newest_first[1]
    _press(browser, Keys.ENTER)
    WebDriverWait(browser, WAIT_S).until(EC.url_contains(f"/d/{newest_first[1]}"))
    assert browser.find_element(By.ID, "status").text == "completed"


def test_on_the_live_overview_the_focus_keeps_its_row_across_swaps(browser, dashboard, held):
    units = [held([f"long task {n}"]) for n in range(2)]
    server = dashboard()
    browser.get(server.url + "/")
    WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.ID, "live-state"), "live"))
    _press(browser, "j", "j")
    focused = _focused(browser)[1]
    assert focused in {u.delegation_id for u in units}
    browser.execute_script("document.querySelector('table.roster').dataset.before = 'swap';")
    # the roster's ages change every second, so the server swaps it: wait for a new table
    WebDriverWait(browser, WAIT_S).until(lambda b: b.execute_script(
        "var t = document.querySelector('table.roster'); return t && t.dataset.before !== 'swap';"))
    assert _focused(browser)[1] == focused  # the same row's link has the focus again
    _press(browser, "k")
    assert _focused(browser)[1] != focused
    _press(browser, Keys.ENTER)
    WebDriverWait(browser, WAIT_S).until(EC.url_contains("/d/deleg_"))
    assert browser.find_element(By.ID, "status").text == "running"
