"""The delegation page (/d/ID) in headless Chromium, against real runs: the SVG timeline the
server drew (lanes, tool calls, stall warning and grace, interrupt, delivery), each child's
transcript (tool calls by name with arguments and results, long texts behind expanders,
markup as text), complete without JavaScript and patched live while the unit runs."""
from __future__ import annotations

import json
import time

import pytest
from selenium.webdriver.support.ui import WebDriverWait

from offload.ledger import JournalEntry, open_ledger
from tests.dashboard.conftest import serve_cli_dashboard, sign_in
from tests.dashboard.test_owner_fate import _killed_mid_run
from tests.e2e.conftest import cli_env, offload
from tests.engine.conftest import wait_event

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]
WAIT_S = 20
_LANES = """return Array.from(document.querySelectorAll('figure.timeline-wide g.lane')).map(function (g) {
  return {state: g.dataset.state, label: g.querySelector('.lane-label').textContent,
          marks: Array.from(g.querySelectorAll('g.mark')).map(function (m) { return m.dataset.kind; }),
          bar: g.querySelector('rect.bar').getBoundingClientRect().width,
          grace: g.querySelectorAll('rect.grace').length}; });"""


_OPEN_RESULT = """var d = document.querySelector('#transcript-0 li.item-result details');
var was = d.open; d.open = true; return was;"""


def _count(browser, selector: str) -> int:
    return browser.execute_script("return document.querySelectorAll(arguments[0]).length;", selector)


def _lanes(browser) -> list[dict]:
    return browser.execute_script(_LANES)


@pytest.fixture
def cli_dashboard(tmp_path, request):
    """``offload dashboard`` on a home of its own, with ``offload`` commands run on that home; the
    test's browser (if it has one) signed in with the address the dashboard printed."""
    home = tmp_path / "home"
    home.mkdir()
    env = cli_env(HERMES_HOME=str(home))
    for served in serve_cli_dashboard(env=env):
        if "browser" in request.fixturenames:
            sign_in(request.getfixturevalue("browser"), served.login_url)
        yield served, home


def _demo_unit(home) -> str:
    done = offload("run", "--demo-model", "compare the formats", HERMES_HOME=str(home))
    assert done.returncode == 0, done.stderr
    return json.loads(offload("inbox", "--all", "--json", HERMES_HOME=str(home)).stdout)["settled"][0]["id"]


def test_a_demo_runs_timeline_and_transcript_are_drawn_from_its_real_run(browser, cli_dashboard):
    url, home = cli_dashboard[0].url, cli_dashboard[1]
    unit = _demo_unit(home)
    browser.get(f"{url}/d/{unit}")
    lanes = _lanes(browser)
    assert [lane["label"].split(" ")[0] for lane in lanes] == ["unit", "#1", "#2", "#3", "delivery"]
    assert [lane["state"] for lane in lanes[:4]] == ["completed"] * 4
    assert "finish" in lanes[0]["marks"]
    assert "tool" in lanes[3]["marks"] and "say" in lanes[3]["marks"]  # the terminal task's real tool call
    assert lanes[4]["state"] == "delivered" and "delivered" in lanes[4]["marks"]
    assert all(lane["bar"] > 0 for lane in lanes)
    third = browser.execute_script(
        "return Array.from(document.querySelectorAll('#transcript-2 li.item')).map(function (li) {"
        " return [li.dataset.kind, li.textContent]; });")
    assert [kind for kind, _ in third] == ["prompt", "call", "result", "say"]
    assert "run_command" in third[1][1] and '"command": "python3 --version && ls"' in third[1][1]
    assert "run_command" in third[2][1] and "Python 3" in third[2][1]


def test_the_page_is_complete_without_javascript(cli_dashboard):
    served, home = cli_dashboard
    unit = _demo_unit(home)
    page = served.get(f"/d/{unit}").text  # what a browser without scripts shows
    assert page.count('<figure class="timeline') == 2 and 'data-kind="tool"' in page
    assert 'id="transcript-2"' in page and "run_command" in page


def test_a_stalled_unit_shows_the_warning_the_grace_and_the_stalled_finish(browser, dashboard, held, runtime):
    server = dashboard()
    unit = held(["summarise the build log"])
    unit.progress = lambda: (((0, None, 1.0),), False)  # never progresses
    runtime.engine.records[unit.delegation_id]["progress_fn"] = unit.progress
    deadline = time.monotonic() + 10
    while not runtime.engine.records[unit.delegation_id].get("_started") and time.monotonic() < deadline:
        time.sleep(0.01)
    now = time.monotonic()
    runtime.engine.stalls.check(now)
    runtime.engine.stalls.check(now + runtime.policy.stall_idle_s + 1)  # the warning: interrupted, grace begins
    unit.interrupted.wait(5)
    runtime.engine.stalls.check(now + runtime.policy.stall_idle_s + runtime.policy.stall_grace_s + 2)  # given up
    wait_event(unit.delegation_id, bus=runtime.bus)
    browser.get(f"{server.url}/d/{unit.delegation_id}")
    [unit_lane, child, delivery] = _lanes(browser)
    assert unit_lane["state"] == "stalled" and unit_lane["marks"][:1] == ["stall"] and "finish" in unit_lane["marks"]
    assert unit_lane["grace"] == 1
    assert child["state"] == "unknown" and delivery["state"] == "awaiting delivery"


def test_an_interrupted_unit_shows_the_interrupt(browser, dashboard, held, runtime):
    server = dashboard()
    unit = held(["run forever"])
    assert runtime.engine.interrupt_one(unit.delegation_id, reason="dashboard") == 1
    wait_event(unit.delegation_id, bus=runtime.bus)
    browser.get(f"{server.url}/d/{unit.delegation_id}")
    [unit_lane, child, _delivery] = _lanes(browser)
    assert unit_lane["state"] == "interrupted" and unit_lane["marks"] == ["interrupt", "finish"]
    assert child["state"] == "interrupted"
    assert "interrupt (dashboard)" in browser.execute_script(
        "return document.querySelector('figure.timeline-wide g.mark-interrupt title').textContent;")


def _crash_drill_killed(home, ready=lambda kinds: True) -> str:
    """The crash drill's `offload run` on ``home``, SIGKILLed once its unit's logged step kinds
    satisfy ``ready``; its delegation id."""
    ledger: list = []

    def logged(row: dict) -> bool:
        ledger[:] = ledger or [open_ledger(home / "state.db")]
        return ready({step.kind for step in ledger[0].read_steps(row["id"])})
    return _killed_mid_run(cli_env(HERMES_HOME=str(home)), ready=logged)


def test_a_unit_recovered_after_its_owner_was_killed_shows_the_unknown_child(browser, cli_dashboard):
    url, home = cli_dashboard[0].url, cli_dashboard[1]
    (home / "config.yaml").write_text("delegation: {resume: never}\n")  # about the unknown child: not resumed
    died = _crash_drill_killed(home)
    offload("inbox", HERMES_HOME=str(home))  # recovers the dead owner's unit
    browser.get(f"{url}/d/{died}")
    [unit_lane, quick, slow, _delivery] = _lanes(browser)
    assert unit_lane["state"] == "unknown" and quick["state"] == "completed" and slow["state"] == "unknown"
    assert "died before the unit finished" in browser.find_element("css selector", "main").text


def test_a_unit_resumed_after_its_owner_was_killed_shows_every_child_with_its_real_result(browser, cli_dashboard):
    url, home = cli_dashboard[0].url, cli_dashboard[1]
    (home / "config.yaml").write_text("delegation: {resume: auto}\n")
    died = _crash_drill_killed(home, ready=lambda kinds: "tool_start" in kinds)  # the slow command runs
    session = open_ledger(home / "state.db").get(died).parent_session_id
    assert offload("inbox", HERMES_HOME=str(home)).returncode == 0  # only looks: leaves the unit to resume
    resumed = offload("run", "--demo-model", "--resume", session, HERMES_HOME=str(home))
    assert resumed.returncode == 0, resumed.stderr
    browser.get(f"{url}/d/{died}")
    [unit_lane, quick, slow, _delivery] = _lanes(browser)
    assert [lane["state"] for lane in (unit_lane, quick, slow)] == ["completed"] * 3
    assert "Resumed after the crash" in browser.find_element("css selector", "main").text  # the slow child's answer


def test_a_running_units_transcript_and_timeline_update_live_and_markup_stays_text(browser, dashboard, held, runtime):
    server = dashboard()
    unit = held(["look around"])
    hostile = "<img src=x onerror=\"window.__pwned = 1\"><b>bold?</b>"
    unit.say(0, {"role": "user", "content": "look around"})
    browser.get(f"{server.url}/d/{unit.delegation_id}")
    WebDriverWait(browser, WAIT_S).until(lambda b: b.find_element("id", "live-state").text == "live")
    browser.execute_script("window.__sameDocument = 'yes';")
    unit.say(0, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "web_search", "arguments": json.dumps({"q": hostile})}}]})
    unit.say(0, {"role": "tool", "tool_call_id": "c1", "content": hostile + " " + "long result " * 100})
    WebDriverWait(browser, WAIT_S).until(lambda b: _count(b, "#transcript-0 li.item") == 3)
    # The page is swapped while the unit runs: read and act in one script, never on a kept element.
    assert browser.execute_script(_OPEN_RESULT) is False  # a long result is cut, the whole behind an expander
    assert "tool" in _lanes(browser)[1]["marks"]
    unit.say(0, {"role": "assistant", "content": f"found {hostile}"})
    WebDriverWait(browser, WAIT_S).until(lambda b: _count(b, "#transcript-0 li.item") == 4)
    assert browser.execute_script(
        "return document.querySelector('#transcript-0 li.item-result details').open;")  # kept open across swaps
    said = browser.execute_script("return document.querySelector('#transcript-0 li.item-say pre').textContent;")
    assert said == f"found {hostile}"
    unit.finish()
    WebDriverWait(browser, WAIT_S).until(lambda b: _lanes(b)[0]["state"] == "completed")
    assert browser.execute_script("return window.__sameDocument === 'yes' && window.__pwned === undefined;")
    runtime.owner_loop.flush_journal()
    kept = runtime.ledger().read_journal(unit.delegation_id)  # kept after it finished, in the ledger
    assert [e.kind for e in kept if e.child == 0] == ["message", "message", "tool_result", "message"]


def test_journal_entries_of_another_process_are_read_from_the_ledger(browser, dashboard, held, runtime):
    server = dashboard()
    did = held(["elsewhere"]).finish()["delegation_id"]
    runtime.ledger().append_journal([JournalEntry(did, time.time(), "message", 0,
                                                  {"role": "assistant", "content": "<script>window.__pwned=2</script>"})])
    browser.get(f"{server.url}/d/{did}")
    assert browser.find_element("css selector", "#transcript-0 li.item-say pre").text == "<script>window.__pwned=2</script>"
    assert browser.execute_script("return window.__pwned === undefined;")
