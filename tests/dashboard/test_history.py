"""The history page: filters (state, delivery, session, owner, model, goal search, age) read
through the ledger's keyset browse, paging by the 'older' link without gaps or repeats, and
the server-drawn charts (finished units by outcome over time, latency percentiles) checked
against the rows behind them."""
from __future__ import annotations

import re
import time

import pytest

from offload.dashboard.app import create_app
from offload.dashboard.history import percentile
from offload.ledger import DispatchRow
from tests.dashboard.conftest import signed_in

pytestmark = pytest.mark.timeout(120)
LOOPBACK = "http://127.0.0.1"


def _row(ledger, n: int, state: str, *, goal: str = "", model: str = "small", session: str = "sess-a",
         took_s: float = 10.0, delivered_after_s: float | None = None, ago_s: float = 600.0) -> str:
    did = f"deleg_h{n:04d}"
    finished_at = time.time() - ago_s
    row = DispatchRow(did, session, finished_at - took_s, {"goal": goal or f"task {n}", "model": model},
                      parent_session_id=session, owner_pid=4000 + n % 3, owner_started_at=1)
    ledger.persist_dispatch(row, row.dispatched_at)
    if state != "running":
        ledger.persist_completion(row, {"status": state, "delegation_id": did}, {"status": state}, finished_at)
        if delivered_after_s is not None:
            ledger.mark_delivered(did, finished_at + delivered_after_s)
    return did


def _ids(page: str) -> list[str]:
    return re.findall(r'<tr class="row" data-status="\w+" data-id="(\w+)"', page)


@pytest.fixture
def client(runtime):
    with signed_in(create_app(runtime)) as c:
        yield c


def test_older_links_walk_every_row_once_newest_first(runtime, client):
    made = [_row(runtime.ledger(), n, "completed", ago_s=1000 - n) for n in range(120)]
    seen, url = [], "/history"
    while url:
        page = client.get(url).text
        seen += _ids(page)
        found = re.search(r'<a href="([^"]+)" id="older"', page)
        url = found.group(1).replace("&amp;", "&") if found else None
    assert seen == list(reversed(made))
    assert 'id="newest"' in client.get("/history?before=" + f"{time.time()!r}~deleg_zzz").text
    assert "is not a page of this history" in client.get("/history?before=garbage").text


def test_filters_narrow_the_rows(runtime, client):
    ledger = runtime.ledger()
    a = _row(ledger, 1, "completed", goal="Survey the <b>pager</b> module", model="big-model")
    b = _row(ledger, 2, "failed", session="sess-b")
    c = _row(ledger, 3, "stalled", model="big-model")
    d = _row(ledger, 4, "running")
    assert set(_ids(client.get("/history", params={"state": "failed,stalled"}).text)) == {b, c}
    assert _ids(client.get("/history", params={"session": "sess-b"}).text) == [b]
    assert set(_ids(client.get("/history", params={"model": "big-model"}).text)) == {a, c}
    page = client.get("/history", params={"q": "<b>PAGER</b>"}).text
    assert _ids(page) == [a] and "Survey the &lt;b&gt;pager&lt;/b&gt; module" in page  # markup stays text
    assert set(_ids(client.get("/history", params={"owner": "4001"}).text)) == {a, d}
    assert d not in _ids(client.get("/history", params={"delivery": "pending"}).text)
    assert client.get("/history", params={"state": "done"}).status_code == 400


def test_the_charts_count_the_finished_rows_by_outcome_and_give_their_latencies(runtime, client):
    ledger = runtime.ledger()
    for n in range(5):
        _row(ledger, n, "completed", took_s=10.0 * (n + 1), delivered_after_s=2.0)
    _row(ledger, 10, "failed", took_s=3.0)
    _row(ledger, 11, "interrupted", took_s=3.0)
    _row(ledger, 12, "stalled", took_s=600.0)
    _row(ledger, 13, "running")
    _row(ledger, 14, "completed", ago_s=3 * 86400)  # outside the default window of one day
    page = client.get("/history").text
    counts: dict[str, int] = {}
    for outcome, count in re.findall(r'data-outcome="(\w+)" data-count="(\d+)"', page):
        counts[outcome] = counts.get(outcome, 0) + int(count)
    assert counts == {"completed": 5, "failed": 2, "stalled": 1}
    latencies = re.findall(r'<title>p(\d+): ([^<]+)</title>', page)
    # dispatch -> finish of the 8 finished in the window: 3, 3, 10, 20, 30, 40, 50, 600 s (nearest rank)
    assert latencies[:3] == [("50", "20.0 s"), ("90", "10m"), ("99", "10m")]
    assert [v for p, v in latencies[3:]] == ["2.00 s"] * 3  # finish -> delivered, the five delivered ones
    assert "dispatch → finish (8 units)" in page and "finish → delivered (5 units)" in page


def test_percentile_is_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
