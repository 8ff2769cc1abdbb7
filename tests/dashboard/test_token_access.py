"""The dashboard's token, on loopback too (issue 40 point 4: only a person decides an approval).

Without the token no request is served (401 and a page saying how to open it); ``?token=`` once
sets a per-port cookie holding an HMAC of the token (never the token) and leaves the address
bar; Prometheus scrapes ``/metrics`` with a bearer token; an action without an ``Origin``
naming the dashboard is refused even with the token; a short token is refused; rotating the
token ends every cookie; ``--token`` on the command line warns. A plain local process (urllib,
as a child's script would be) cannot decide an approval against the served dashboard."""
from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from http.cookies import SimpleCookie

import httpx
import pytest
from starlette.testclient import TestClient

from offload.dashboard.app import create_app
from offload.dashboard.security import cookie_name, cookie_value
from offload.errors import CliError
from offload.subagents import approvals
from offload.access.tokens import TokenStore
from tests.dashboard.conftest import LOOPBACK
from tests.dashboard.test_approvals_page import _ask
from tests.e2e.conftest import cli_env

pytestmark = pytest.mark.timeout(60)
PATHS = ("/", "/history", "/roster", "/metrics", "/events", "/d/deleg_0", "/api/delegations", "/static/dashboard.js")


@pytest.fixture
def app(runtime):
    return create_app(runtime, refresh_s=0.05)


def test_by_default_the_home_s_token_is_required_on_every_path(runtime, app):
    token = TokenStore(runtime.home).get()
    assert app.state.token() == token and len(token) >= 32
    with TestClient(app, base_url=LOOPBACK) as anonymous:
        for path in PATHS:
            assert anonymous.get(path).status_code == 401, path
        page = anonymous.get("/", headers={"Accept": "text/html"})
        assert page.headers["content-type"].startswith("text/html") and "offload token show" in page.text
        assert token not in page.text
        assert anonymous.get("/metrics", headers={"Authorization": "Bearer " + "x" * 43}).status_code == 401
        scrape = anonymous.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert scrape.status_code == 200 and "offload_ledger_units" in scrape.text


def test_the_token_in_the_address_becomes_a_per_port_cookie_holding_a_derived_value(runtime):
    token = TokenStore(runtime.home).get()
    with TestClient(create_app(runtime), base_url="http://127.0.0.1:8765") as browser:
        adopted = browser.get(f"/history?token={token}&state=running", follow_redirects=False)
        assert adopted.status_code == 303 and adopted.headers["location"] == "/history?state=running"
        cookie = SimpleCookie(adopted.headers["set-cookie"])
        assert list(cookie) == [cookie_name(8765)] == ["offload_dashboard_8765"]
        morsel = cookie[cookie_name(8765)]
        assert morsel.value == cookie_value(token) and token not in adopted.headers["set-cookie"]
        assert morsel["httponly"] and morsel["samesite"].lower() == "strict"
        assert browser.get("/history").status_code == 200  # the cookie carries it now
    with TestClient(create_app(runtime), base_url="http://127.0.0.1:8765",
                    cookies={cookie_name(8765): token}) as thief:  # the token itself is not a cookie value
        assert thief.get("/").status_code == 401
    with TestClient(create_app(runtime), base_url="http://127.0.0.1:8766",
                    cookies={cookie_name(8765): cookie_value(token)}) as other_port:
        assert other_port.get("/").status_code == 401  # another port's cookie opens nothing here


def test_an_action_needs_the_token_and_an_origin_naming_the_dashboard(runtime, app, held):
    ledger = runtime.ledger()
    _ask(ledger, "apr_x", held(["clean"]).delegation_id, "rm -rf build")
    token = app.state.token()
    bearer = {"Authorization": f"Bearer {token}"}
    with TestClient(app, base_url=LOOPBACK) as c:
        attempts = [({}, 401), ({"Origin": LOOPBACK}, 401), (bearer, 403),
                    ({**bearer, "Origin": "http://evil.example"}, 403), ({**bearer, "Origin": "null"}, 403),
                    ({**bearer, "Origin": "http://127.0.0.1:9999"}, 403)]
        for headers, status in attempts:
            assert c.post("/approvals/apr_x/allow", headers=headers).status_code == status, headers
        assert c.post(f"/approvals/apr_x/allow?token={token}", headers={"Origin": LOOPBACK}).status_code == 401
        assert approvals.get(ledger, "apr_x")["state"] == "pending"
        c.get(f"/?token={token}")  # signed in as a browser: the cookie, then the page's own Origin
        assert c.post("/approvals/apr_x/deny").status_code == 403
        assert approvals.get(ledger, "apr_x")["state"] == "pending"
        assert c.post("/approvals/apr_x/deny", headers={"Origin": LOOPBACK}).status_code == 200
    assert approvals.get(ledger, "apr_x")["state"] == "denied"


def test_rotating_the_token_ends_the_old_cookie_and_bearer(runtime, app):
    old = app.state.token()
    with TestClient(app, base_url=LOOPBACK) as c:
        c.get(f"/?token={old}")
        assert c.get("/").status_code == 200
        new = TokenStore(runtime.home).rotate()
        assert c.get("/").status_code == 401
        assert c.get("/", headers={"Authorization": f"Bearer {old}"}).status_code == 401
        assert c.get("/", headers={"Authorization": f"Bearer {new}"}).status_code == 200


def test_short_tokens_are_refused_with_the_fix(runtime, monkeypatch):
    with pytest.raises(CliError, match=r"at least 32"):
        create_app(runtime, token="tok-123")
    monkeypatch.setenv("OFFLOAD_DASHBOARD_TOKEN", "short")
    with pytest.raises(CliError, match=r"\$OFFLOAD_DASHBOARD_TOKEN is too short .*openssl rand -hex 32"):
        create_app(runtime)
    monkeypatch.setenv("OFFLOAD_DASHBOARD_TOKEN", "e" * 40)
    assert create_app(runtime).state.token() == "e" * 40


def _serve(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "offload", "dashboard", "--port", "0", *args],
                            stderr=subprocess.PIPE, text=True, env=cli_env(**env))


def _post(url: str, headers: dict[str, str]) -> int:
    """A plain local process's POST (no cookie jar, no token): its HTTP status."""
    request = urllib.request.Request(url, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_the_cli_prints_the_address_with_the_token_once_and_a_local_process_cannot_decide(
        runtime, held, _isolated_hermes_home):
    _ask(runtime.ledger(), "apr_cli", held(["x"]).delegation_id, "pip install left-pad")
    server = _serve(HERMES_HOME=str(_isolated_hermes_home))
    try:
        banner = [server.stderr.readline(), server.stderr.readline()]
        url = banner[0].split(" on ", 1)[1].split("/ ", 1)[0]
        token = TokenStore(_isolated_hermes_home).get()
        assert f"open {url}/?token={token} once" in banner[1] and token not in banner[0]
        for headers in ({}, {"Origin": url}, {"Origin": url, "Cookie": f"{cookie_name(0)}=x"}):
            assert _post(f"{url}/approvals/apr_cli/allow", headers) == 401, headers
        assert _post(f"{url}/approvals/apr_cli/allow", {"Authorization": f"Bearer {token}"}) == 403  # no Origin
        assert approvals.get(runtime.ledger(), "apr_cli")["state"] == "pending"
        assert httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        server.send_signal(signal.SIGTERM)
        assert server.wait(15) == 0
    finally:
        server.kill()


def test_a_token_on_the_command_line_warns_and_a_short_one_is_refused(_isolated_hermes_home):
    home = str(_isolated_hermes_home)
    short = _serve("--token", "tok-cli", HERMES_HOME=home)
    assert short.wait(30) == 2
    message = short.stderr.read()
    assert "--token is deprecated" in message and "ps" in message and "OFFLOAD_DASHBOARD_TOKEN" in message
    assert "too short" in message and "tok-cli" not in message and "Traceback" not in message
    server = _serve("--token", "t" * 40, HERMES_HOME=home)
    try:
        warning = server.stderr.readline()
        assert warning.startswith("offload: warning: --token is deprecated")
        url = server.stderr.readline().split(" on ", 1)[1].split("/ ", 1)[0]
        assert httpx.get(url + "/", headers={"Authorization": "Bearer " + "t" * 40}).status_code == 200
    finally:
        server.kill()
        server.wait(15)
    env_short = _serve(HERMES_HOME=home, OFFLOAD_DASHBOARD_TOKEN="abc")
    assert env_short.wait(30) == 2 and "$OFFLOAD_DASHBOARD_TOKEN is too short" in env_short.stderr.read()
