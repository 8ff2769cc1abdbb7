"""The dashboard's pages, actions, guard and /metrics over HTTP (Starlette's test client)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from offload.dashboard.app import create_app, parse_age
from offload.access.http import is_loopback
from tests.dashboard.conftest import LOOPBACK, signed_in

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def client(runtime):
    with signed_in(create_app(runtime, refresh_s=0.05)) as c:
        yield c


def _finished(held, goals, summaries=None):
    unit = held(goals, summaries)
    unit.finish()
    return unit.delegation_id


def test_history_filters_by_state_delivery_session_and_age(runtime, client, held):
    running = held(["still going"])
    done = _finished(held, ["done soon"])
    acked = _finished(held, ["acked"])
    runtime.deliveries.mark_delivered(acked)
    page = client.get("/history").text
    assert all(i in page for i in (running.delegation_id, done, acked))
    page = client.get("/history", params={"state": "running"}).text
    assert running.delegation_id in page and done not in page
    page = client.get("/history", params={"delivery": "delivered"}).text
    assert acked in page and done not in page and running.delegation_id not in page
    assert "no delegations match" in client.get("/history", params={"session": "another-session"}).text
    assert done in client.get("/history", params={"session": "sess-1", "age": "5m"}).text
    bad = client.get("/history", params={"age": "soon"})
    assert bad.status_code == 400 and "use a number with s, m, h or d" in bad.text


def test_detail_shows_task_children_delivery_and_owner(client, held):
    did = _finished(held, ["alpha", "beta"], ["first result", "second result"])
    page = client.get(f"/d/{did}").text
    for expected in ("alpha", "beta", "first result", "second result", "0 attempt(s)",
                     "alive", "As the agent read it", "ASYNC DELEGATION BATCH COMPLETE"):
        assert expected in page, expected
    missing = client.get("/d/deleg_nope")
    assert missing.status_code == 404 and "No delegation deleg_nope" in missing.text


def test_ack_and_drop_settle_a_pending_result_like_the_cli(runtime, client, held):
    first, second = _finished(held, ["one"]), _finished(held, ["two"])
    answer = client.post(f"/d/{first}/ack")
    assert answer.status_code == 200 and f"acknowledged {first}" in answer.text  # followed the 303
    assert runtime.ledger().get(first).delivery_state == "delivered"
    assert "already delivered" in client.post(f"/d/{first}/drop").text
    assert f"dropped {second}" in client.post(f"/d/{second}/drop").text
    assert runtime.ledger().get(second).delivery_state == "dropped"
    assert runtime.ledger().get(second).drop_reason == "dropped from the dashboard"
    assert "dropped: dropped from the dashboard" in client.get(f"/d/{second}").text  # the reason, for any host
    assert "dropped from the dashboard" in client.get("/history").text


def _other_owner() -> tuple[subprocess.Popen, str]:
    owner = subprocess.Popen([sys.executable, str(Path(__file__).with_name("interruptible_owner.py"))],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    ready = owner.stdout.readline().split()
    if ready[:1] != ["READY"]:
        owner.kill()
        pytest.fail(f"the other owner did not start: {ready}")
    return owner, ready[1]


def test_interrupt_reaches_a_unit_another_process_runs(runtime, client):
    owner, delegation_id = _other_owner()
    try:
        text = client.post(f"/d/{delegation_id}/interrupt").text
        assert f"interrupt requested from process {owner.pid}" in text
        assert owner.wait(30) == 0  # it saw the request, interrupted its unit and recorded the result
    finally:
        owner.kill()
    row = runtime.ledger().get(delegation_id)
    assert row.state == "interrupted" and row.result["results"][0]["status"] == "interrupted"
    assert runtime.ledger().take_control([delegation_id], time.time()) == []  # the owner took the request


def test_interrupt_of_a_unit_whose_process_died_says_so(client):
    owner, delegation_id = _other_owner()
    owner.send_signal(signal.SIGKILL)
    owner.wait(10)
    text = client.post(f"/d/{delegation_id}/interrupt").text
    assert f"(process {owner.pid}) has exited" in text and "offload inbox" in text
    assert "still running; interrupt it first" in client.post(f"/d/{delegation_id}/ack").text


def test_cross_site_post_is_refused(runtime, client, held):
    did = _finished(held, ["x"])
    refused = client.post(f"/d/{did}/ack", headers={"Origin": "http://evil.example"})
    assert refused.status_code == 403
    assert runtime.ledger().get(did).delivery_state == "pending"
    assert client.post(f"/d/{did}/ack", headers={"Origin": LOOPBACK}).status_code == 200


def test_loopback_names():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.5", "::", "example.com"))


def test_parse_age():
    assert parse_age("") is None and parse_age("90") == 90 and parse_age("15m") == 900 and parse_age("2h") == 7200
    with pytest.raises(ValueError, match="15m or 2h"):
        parse_age("-1h")


def _metrics(client) -> dict[tuple[str, tuple], float]:
    text = client.get("/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_parse_and_match_the_ledger(runtime, client, held):
    before = _metrics(client)
    running = held(["running"])
    done = [_finished(held, [f"t{i}"]) for i in range(3)]
    runtime.deliveries.mark_delivered(done[0])
    runtime.deliveries.drop(done[1])
    samples = _metrics(client)
    rows = [runtime.ledger().get(d) for d in (running.delegation_id, *done)]
    assert [r.state for r in rows] == ["running", "completed", "completed", "completed"]
    assert samples[("offload_ledger_units", (("delivery_state", "none"), ("state", "running")))] == 1
    for delivery in ("delivered", "dropped", "pending"):
        assert samples[("offload_ledger_units", (("delivery_state", delivery), ("state", "completed")))] == 1
    assert samples[("offload_ledger_delivery_attempts", ())] == sum(r.delivery_attempts for r in rows)

    def grew(name, labels=()):
        return samples.get((name, labels), 0) - before.get((name, labels), 0)
    assert grew("offload_units_dispatched_total") == len(rows)  # read from the ledger
    assert grew("offload_units_finished_total", (("state", "completed"),)) == 3
    assert grew("offload_units_delivered_total") == 1 and grew("offload_units_dropped_total") == 1
    assert samples[("offload_units_running", ())] == 1 and samples[("offload_units_awaiting_delivery", ())] == 1
    assert grew("offload_completion_latency_seconds_count") == 3
    assert grew("offload_dispatch_latency_seconds_count") == 4
    assert grew("offload_delivery_steps_total", (("outcome", "acknowledged"),)) == 1
    assert grew("offload_delivery_steps_total", (("outcome", "dropped"),)) == 1


def test_roster_stream_sends_the_fragment_when_it_changes(runtime, held):
    app = create_app(runtime, refresh_s=0.05)
    unit = held(["streamed"])
    with signed_in(app) as c, c.stream("GET", "/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = []
        for line in stream.iter_lines():
            lines.append(line)
            if line == "" and lines[:1] == ["event: roster"]:
                break
        assert any(unit.delegation_id in line for line in lines)
        assert all(line.startswith("data: ") for line in lines[1:-1])
        app.state.dashboard.stopping.set()


def test_an_unreadable_ledger_is_a_clear_page_not_a_crash(runtime, client, held):
    _finished(held, ["x"])
    state_db = Path(os.environ["HERMES_HOME"]) / "state.db"
    runtime.ledger().close()  # close the open connection; the next read opens the damaged file
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state_db}{suffix}").unlink(missing_ok=True)
    state_db.write_bytes(b"this is not a database" * 100)
    page = client.get("/history")
    assert page.status_code == 503 and "The ledger cannot be read" in page.text
    assert "state.db" in page.text  # the ledger's own message: which file, and what to do
    assert "the ledger cannot be read" in client.get("/roster").text
    assert client.get("/metrics").status_code == 200  # a scrape still answers, the error is counted


def _serve(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "offload", "dashboard", *args], stderr=subprocess.PIPE, text=True)


def test_cli_names_a_port_it_cannot_listen_on():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = _serve("--port", str(taken.getsockname()[1]))
        assert server.wait(30) == 2
        message = server.stderr.read()
    assert "could not listen on 127.0.0.1:" in message and "pick another with --port" in message
    assert "Traceback" not in message


def test_a_queued_unit_cannot_be_acked_or_dropped_and_its_page_offers_stop(runtime, client):
    from offload.ledger import DispatchRow

    row = DispatchRow("deleg_waiting", "sess-1", time.time(), {"goal": "wait your turn"}, parent_session_id="sess-1")
    assert runtime.ledger().enqueue_unit(row, row.dispatched_at)
    for action in ("ack", "drop"):
        assert "deleg_waiting is still queued; interrupt it first" in client.post(f"/d/deleg_waiting/{action}").text
    assert runtime.ledger().get("deleg_waiting").state == "queued"  # nothing settled
    page = client.get("/d/deleg_waiting").text
    assert 'id="interrupt"' in page and "stop (it never starts)" in page and 'id="ack"' not in page
