"""A real PostgreSQL restart mid-run: the server is stopped with results in flight and
started again. Meanwhile units keep running, new ones are dispatched, every result is
delivered in memory, and the writes that failed (dispatches, finished children, completions,
delivery state) are written once the server is back -- so afterwards every unit's row holds
its real result, each result was delivered exactly once, and a restore offers nothing again.
"""
from __future__ import annotations

import logging
import queue
import threading
import time

import pytest

from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from tools.process_registry import process_registry

pytestmark = pytest.mark.timeout(180)
SESSION = "agent:main:cli:dm:1"
EARLY, HELD, WHILE_DOWN = 3, 8, 4


def dispatch(i: int, go: threading.Event | None, ids: dict[int, str]) -> str:
    def run() -> dict:
        if go is not None:
            go.wait()
            ad.record_unit_child(ids[i], {"task_index": 0, "status": "completed", "summary": f"child {i}"})
        return {"status": "completed", "summary": f"done {i}"}
    ids[i] = ad.dispatch_async_delegation(goal=f"g{i}", context=None, toolsets=None, role="leaf", model="m",
                                          session_key=SESSION, runner=run, max_async_children=64)["delegation_id"]
    return ids[i]


def deliver(evt: dict) -> bool:
    claim = delivery.claim_event_delivery(evt, "test-consumer")
    assert claim, f"{evt['delegation_id']} could not be claimed"
    return delivery.complete_event_delivery(evt, claim)


def events(n: int) -> list[dict]:
    return [process_registry.completion_queue.get(timeout=60) for _ in range(n)]


def wait_written(ledger, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(ledger.outbox):
        assert time.monotonic() < deadline, f"{len(ledger.outbox)} kept writes never reached the server"
        time.sleep(0.05)


def test_a_server_restart_mid_run_loses_no_result_and_delivers_each_exactly_once(
        monkeypatch, pg_schema, pg_server, caplog):
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", pg_schema.url)
    delivery.reset_for_tests()
    ad._reset_for_tests()
    ids: dict[int, str] = {}
    go = threading.Event()
    seen: list[str] = []

    for i in range(EARLY):  # finished, acknowledged by the database, two of them delivered
        dispatch(i, None, ids)
    early = events(EARLY)
    seen += [e["delegation_id"] for e in early]
    assert all(deliver(e) for e in early[:2])
    for i in range(EARLY, EARLY + HELD):  # running across the restart
        dispatch(i, go, ids)
    ledger = delivery.current_ledger()
    assert {ledger.get(ids[i]).state for i in range(EARLY, EARLY + HELD)} == {"running"}

    pg_server.stop()
    with caplog.at_level(logging.WARNING, logger="offload.engine"):
        for i in range(EARLY + HELD, EARLY + HELD + WHILE_DOWN):
            dispatch(i, go, ids)
        deliver(early[2])  # delivered in memory; its delivery state waits for the server
        go.set()
        late = events(HELD + WHILE_DOWN)  # every result still arrives, in memory
        seen += [e["delegation_id"] for e in late]
        for e in late[:6]:
            deliver(e)
        assert len(ledger.outbox) > 0  # the server is down: those writes wait

        pg_server.start()
        wait_written(ledger)
    assert any("is reachable again" in r.getMessage() for r in caplog.records)
    for e in late[6:]:
        assert deliver(e) is True

    assert sorted(seen) == sorted(ids.values())  # exactly one event per unit
    with pytest.raises(queue.Empty):
        process_registry.completion_queue.get(timeout=0.5)
    rows = {i: ledger.get(did) for i, did in ids.items()}
    assert {(r.state, r.delivery_state) for r in rows.values()} == {("completed", "delivered")}
    assert {i: r.result["summary"] for i, r in rows.items()} == {i: f"done {i}" for i in ids}

    replay: queue.Queue = queue.Queue()  # a restart now offers nothing again
    assert delivery.restore_undelivered_completions(replay) == 0
    assert all(delivery.claim_completion_delivery(did, "another-consumer") is False for did in ids.values())
    ad._reset_for_tests()
