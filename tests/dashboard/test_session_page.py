"""The session page (/s/SESSION): the session's delegations side by side on one time axis, and
where each result went -- a gateway chat, an MCP client's namespace, or the session itself --
with how far its delivery got; checked against real runs in headless Chromium."""
from __future__ import annotations

import json
import time

import pytest

from offload.dashboard.sessions import destination
from offload.ledger import DispatchRow
from offload.origin import Origin
from tests.dashboard.test_delegation_page import _demo_unit, cli_dashboard  # noqa: F401 (fixture)
from tests.e2e.conftest import offload
from tests.dashboard.conftest import signed_in

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def test_a_sessions_runs_are_drawn_side_by_side_with_where_each_went(browser, cli_dashboard):  # noqa: F811
    url, home = cli_dashboard[0].url, cli_dashboard[1]
    first = _demo_unit(home)
    again = offload("run", "--demo-model", "--resume", "last", "compare the formats", HERMES_HOME=str(home))
    assert again.returncode == 0, again.stderr
    settled = json.loads(offload("inbox", "--all", "--json", HERMES_HOME=str(home)).stdout)["settled"]
    second, session = settled[0]["id"], settled[0]["session"]
    assert second != first and {row["session"] for row in settled} == {session}  # one session, two runs
    browser.get(f"{url}/history")
    browser.find_element("css selector", f'tr[data-id="{second}"] td a[href^="/s/"]').click()
    assert browser.current_url.endswith(f"/s/{session}")
    lanes = browser.execute_script(
        "return Array.from(document.querySelectorAll('figure.timeline-wide g.lane')).map(function (g) {"
        " return [g.dataset.state, Array.from(g.querySelectorAll('g.mark')).map(function (m) { return m.dataset.kind; })]; });")
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.session tr.row')).map(function (r) {"
        " return [r.dataset.id, r.querySelector('td.went').textContent]; });")
    assert [did for did, _ in rows] == [second, first]  # newest first in the table
    assert len(lanes) == 2  # oldest first on the shared axis
    assert all(state == "completed" and "finish" in marks and "delivered" in marks for state, marks in lanes)
    assert all("its session in offload chat" in went and "delivered after 1 attempt(s)" in went for _, went in rows)


def test_destinations_name_the_chat_the_mcp_client_or_the_session():
    chat = Origin.capture("agent:main:telegram:dm:42")
    assert destination(chat) == "telegram dm chat 42 (gateway)"
    assert destination(Origin.capture("mcp:alice")) == "MCP client, namespace alice"
    assert destination(Origin.capture("sess_123")).startswith("its session in offload chat")


def test_an_unknown_session_is_a_404_that_points_to_the_history(runtime):
    
    from offload.dashboard.app import create_app

    row = DispatchRow.of("deleg_gw", Origin.capture("agent:main:telegram:dm:42"), time.time(), {"goal": "g"})
    runtime.ledger().persist_dispatch(row, time.time())
    with signed_in(create_app(runtime)) as client:
        missing = client.get("/s/nobody")
        assert missing.status_code == 404 and "/history" in missing.text
        page = client.get("/s/agent:main:telegram:dm:42").text
        assert "deleg_gw" in page and "telegram dm chat 42 (gateway)" in page and "not finished yet" in page
