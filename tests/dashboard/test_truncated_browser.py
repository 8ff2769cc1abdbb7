"""A cut-off child is marked in the dashboard too (issue 39, point 1), in headless Chromium:
the overview's roster (the unit's row and the child's), the delegation page's children table
and its timeline show ⚠ TRUNCATED in the warn tone beside the state ``completed``, never a plain
green completed. The unit comes from a real ``offload run`` against the scripted model server,
whose first child's reply ends with ``finish_reason: length``; its sibling completes whole."""
from __future__ import annotations

import json

import pytest
import yaml
from selenium.webdriver.support.ui import WebDriverWait

from tests.dashboard.conftest import serve_cli_dashboard, sign_in
from tests.e2e.conftest import cli_env, offload, scripted_parent
from tests.e2e.test_truncated_views_e2e import TASKS, cut_off_first

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]
WAIT_S = 20

_ROWS = """return Array.from(document.querySelectorAll(arguments[0])).map(function (row) {
  var cut = row.querySelector('.truncated');
  return {state: row.dataset.status || row.parentNode.dataset.status, cut: cut ? cut.textContent : null,
          tone: cut ? getComputedStyle(cut).color : null,
          plain: getComputedStyle(row.querySelector('.badge')).color}; });"""
_LANES = """return Array.from(document.querySelectorAll('figure.timeline-wide g.lane')).map(function (g) {
  return {state: g.dataset.state, tone: g.getAttribute('class')}; });"""


@pytest.fixture
def truncated_unit(tmp_path, model_server):
    """A home holding one delivered unit whose first child was cut off, and its dashboard."""
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    home.mkdir()
    workspace.mkdir()
    server = model_server(scripted_parent(child=cut_off_first, delegate=TASKS))
    (home / "config.yaml").write_text(yaml.safe_dump({"model": "demo-model", "base_url": server.url,
                                                      "workspace": str(workspace), "toolsets": ["delegation"]}))
    done = offload("run", "go", HERMES_HOME=str(home))
    assert done.returncode == 5, done.stderr
    [unit] = json.loads(offload("inbox", "--all", "--json", HERMES_HOME=str(home)).stdout)["settled"]
    for served in serve_cli_dashboard(env=cli_env(HERMES_HOME=str(home))):
        yield served, unit["id"]


def test_the_overview_marks_the_unit_and_its_cut_off_child(browser, truncated_unit):
    served, did = truncated_unit
    sign_in(browser, served.login_url)
    url = served.url
    browser.get(url + "/")
    WebDriverWait(browser, WAIT_S).until(lambda b: b.execute_script(
        "return document.getElementById(arguments[0]) !== null;", f"unit-{did}"))
    [unit] = browser.execute_script(_ROWS, f"#unit-{did} tr.unit-row")
    assert unit["state"] == "completed" and unit["cut"] == "⚠ TRUNCATED 1/2", unit
    cut, whole = browser.execute_script(_ROWS, f"#unit-{did} tr.child")
    assert cut["state"] == "completed" and cut["cut"] == "⚠ completed, TRUNCATED", cut
    assert whole["state"] == "completed" and whole["cut"] is None
    assert cut["tone"] != whole["plain"]  # amber, not the green of a whole completed child


def test_the_delegation_page_marks_the_child_in_its_table_and_timeline(browser, truncated_unit):
    served, did = truncated_unit
    sign_in(browser, served.login_url)
    browser.get(f"{served.url}/d/{did}")
    cut, whole = browser.execute_script(_ROWS, "table.children tr.child")
    assert cut["cut"] == "⚠ completed, TRUNCATED" and whole["cut"] is None
    assert "⚠ TRUNCATED 1/2" in browser.find_element("css selector", "h1").text
    unit_lane, first, second, _delivery = browser.execute_script(_LANES)
    assert unit_lane["state"] == "completed, 1 TRUNCATED" and "tone-warn" in unit_lane["tone"]
    assert first["state"] == "completed, TRUNCATED" and "tone-warn" in first["tone"]
    assert second["state"] == "completed" and "tone-ok" in second["tone"]
