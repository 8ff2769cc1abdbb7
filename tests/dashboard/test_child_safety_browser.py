"""Issue 29 in real headless Chromium: a unit waiting in the queue is shown ``queued`` (with its
goal) in the live roster, and ``interrupted`` in the same document, without a reload, once it
was stopped from the queue (item 3); a running child's last finished tool call and the last
line it is writing are in its roster row, and follow it as it works (item 4)."""
from __future__ import annotations

import threading
import time

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from offload.engine.units import batch_spec
from offload.ledger import DispatchRow
from offload.origin import Origin
from tests.dashboard.test_browser import WAIT_S, _children, _status

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]


def test_a_queued_unit_is_shown_queued_then_its_outcome_live(browser, dashboard, runtime):
    did = "deleg_queuedinbrowser"
    spec = {"goals": ["wait for a free slot"], "tasks": [{"goal": "wait for a free slot"}], "is_batch": True}
    ledger = runtime.ledger()
    assert ledger.enqueue_unit(DispatchRow.of(did, Origin.capture("sess-q", "sess-q"), time.time(), spec), time.time())
    server = dashboard()
    browser.get(server.url + "/")
    WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.ID, "live-state"), "live"))
    browser.execute_script("window.__sameDocument = 'yes';")  # gone if the page reloads
    WebDriverWait(browser, WAIT_S).until(lambda b: _status(b, did) == "queued")
    assert "wait for a free slot" in browser.find_element(By.ID, f"unit-{did}").text
    assert runtime.admission.cancel(lambda row: row.delegation_id == did, "stopped by the test") == 1
    WebDriverWait(browser, WAIT_S).until(lambda b: _status(b, did) == "interrupted")  # it never ran
    assert browser.execute_script("return window.__sameDocument;") == "yes"


def test_a_running_childs_last_tool_and_line_follow_it_in_the_roster(browser, dashboard, runtime):
    release = threading.Event()
    progress = [(2, None, time.time(), "Reading the two outputs", "read_file ok 0.1 s")]

    def runner() -> dict:
        release.wait(30)
        return {"results": [{"task_index": 0, "status": "completed", "summary": "same"}]}
    handle = runtime.engine.dispatch(batch_spec(["compare the outputs"], model="m", origin=Origin.capture("sess-p")),
                                     runner, 10, interrupt_fn=release.set, progress_fn=lambda: (list(progress), False))
    did = handle["delegation_id"]
    try:
        server = dashboard()
        browser.get(server.url + "/")
        WebDriverWait(browser, WAIT_S).until(lambda b: "last read_file ok 0.1 s" in str(_children(b, did)))
        assert "Reading the two outputs" in str(_children(browser, did))
        progress[0] = (3, None, time.time(), "Comparing the two outputs now", "run_command ok 0.3 s")
        WebDriverWait(browser, WAIT_S).until(lambda b: "last run_command ok 0.3 s" in str(_children(b, did)))
        assert "Comparing the two outputs now" in str(_children(browser, did))
    finally:
        release.set()
