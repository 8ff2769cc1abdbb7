"""``/api/delegations`` pages through every row with a keyset, like the history: past the ~1000
settled rows it used to stop at, without gaps or repeats, newest first, with the history's
filters; ``limit`` is checked and a bad one is a 400 naming the range."""
from __future__ import annotations

import pytest

from bench.cases.ledger_fill import fill
from offload.dashboard.app import create_app
from offload.dashboard.history import API_MAX_ROWS, API_PAGE_ROWS
from offload.home import state_db_path
from tests.dashboard.conftest import signed_in

pytestmark = [pytest.mark.timeout(120), pytest.mark.sqlite_only]  # filled through the SQLite file
LOOPBACK = "http://127.0.0.1"
ROWS = 2_345  # settled rows: more than twice what the list used to read


@pytest.fixture
def client(runtime):
    fill(state_db_path(), ROWS, delivery_state="delivered")
    with signed_in(create_app(runtime)) as c:
        yield c


def _walk(client: TestClient, url: str) -> tuple[list[str], int]:
    seen, pages = [], 0
    while url:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert all(d["schema"] == "offload.result/1" for d in body["delegations"])
        seen += [d["id"] for d in body["delegations"]]
        url, pages = body["next"], pages + 1
    return seen, pages


def test_next_links_walk_every_row_once_newest_first(client):
    seen, pages = _walk(client, f"/api/delegations?limit={API_MAX_ROWS}")
    assert seen == [f"deleg_fill{i:08d}" for i in reversed(range(ROWS))]
    assert pages == 3  # 1000 + 1000 + 345


def test_the_default_page_and_a_filter_keep_paging(client):
    first = client.get("/api/delegations").json()
    assert len(first["delegations"]) == API_PAGE_ROWS and first["next"].startswith("/api/delegations?before=")
    seen, _pages = _walk(client, "/api/delegations?q=bug+%2342&state=completed&limit=7")
    assert seen and all("#42" in client.get(f"/api/delegations/{did}").json()["label"] for did in seen)
    assert len(seen) == sum(1 for i in range(ROWS) if "#42" in f"fix bug #{i}")
    assert client.get("/api/delegations", params={"state": "failed"}).json() == {"delegations": [], "next": None}


@pytest.mark.parametrize("limit", ["0", "1001", "ten", "-5"])
def test_a_bad_limit_or_page_is_a_400_naming_the_fix(client, limit):
    bad = client.get("/api/delegations", params={"limit": limit})
    assert bad.status_code == 400 and f"use 1 to {API_MAX_ROWS}" in bad.json()["error"]
    mangled = client.get("/api/delegations", params={"before": "garbage"})
    assert mangled.status_code == 400 and "is not a page of this history" in mangled.json()["error"]
