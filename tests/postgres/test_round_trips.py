"""The PostgreSQL ledger's hot writes cost one round trip each (issue 31): a unit queued, a
worker's claim, starting the claimed unit, a finished child, the completion with its NOTIFY,
and a local dispatch with or without the cross-host capacity check; and a worker's listener
wakes for units queued, not for results settled (those wake only a worker that waits for a
slot, through ``listen(settled=True)``).

Round trips are counted as ``bench.probes.worker_probe`` counts a worker's: every exchange of a psycopg
connection with the server. A pooled connection is lent without a liveness check while it was
used within ``CHECK_IDLE_S``; the tests set that long, so a slow machine does not add checks."""
from __future__ import annotations

import queue
from pathlib import Path

import psycopg
import pytest

from bench.probes import worker_probe
import offload.ledger.postgres.connections as postgres_connections
from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.protocol import DispatchRow

pytestmark = pytest.mark.timeout(60)
SESSION = "agent:main:cli:dm:1"


def row(did: str) -> DispatchRow:
    return DispatchRow(did, SESSION, 1.0, {"goal": "g"}, owner_pid=1, owner_started_at=1)


@pytest.fixture
def round_trips(monkeypatch, tmp_path: Path):
    """``round_trips()``: the round trips this process made so far."""
    monkeypatch.setattr(psycopg.Connection, "wait", psycopg.Connection.wait)  # restored after the test
    monkeypatch.setattr(psycopg.Connection, "notifies", psycopg.Connection.notifies)
    path = worker_probe.new_count_file(tmp_path / "round-trips")
    worker_probe.install(path)
    return lambda: worker_probe.read_count(path)


def cost(round_trips, action) -> int:
    before = round_trips()
    action()
    return round_trips() - before


def test_each_hot_write_is_one_round_trip(pg_schema, round_trips, monkeypatch):
    monkeypatch.setattr(postgres_connections, "CHECK_IDLE_S", 600.0)
    ledger = PostgresLedger(pg_schema.url, host_id="host-worker")
    try:
        ledger.enqueue_unit(row("deleg_warm"), 1.0)  # the tables, the lease: once per process
        ledger.claim_queued_unit(1.0, 10)
        done = {"delegation_id": "deleg_q", "status": "completed", "completed_at": 2.0}
        assert cost(round_trips, lambda: ledger.enqueue_unit(row("deleg_q"), 1.0)) == 1
        assert cost(round_trips, lambda: ledger.claim_queued_unit(1.0, 10)) == 1
        assert cost(round_trips, lambda: ledger.persist_dispatch_within(row("deleg_q"), 1.0, 10)) == 1
        assert cost(round_trips, lambda: ledger.record_unit_child("deleg_q", {"task_index": 0}, 1.5)) == 1
        assert cost(round_trips, lambda: ledger.persist_completion(row("deleg_q"), done, {"results": []}, 2.0)) == 1
        assert cost(round_trips, lambda: ledger.persist_dispatch(row("deleg_local"), 1.0)) == 1
        assert cost(round_trips, lambda: ledger.persist_dispatch_within(row("deleg_local_2"), 1.0, 10)) == 1
        assert cost(round_trips, lambda: ledger.claim_queued_unit(1.0, 10)) == 1  # nothing queued: still one
        assert ledger.get("deleg_q").state == "completed" and ledger.get("deleg_q").result == {"results": []}
    finally:
        ledger.close()


def test_a_connection_idle_past_check_idle_s_is_checked_before_it_is_lent(pg_schema, round_trips, monkeypatch):
    ledger = PostgresLedger(pg_schema.url, host_id="host-a")
    try:
        ledger.persist_dispatch(row("deleg_warm"), 1.0)
        monkeypatch.setattr(postgres_connections, "CHECK_IDLE_S", 0.0)
        assert cost(round_trips, lambda: ledger.persist_dispatch(row("deleg_a"), 1.0)) == 2
    finally:
        ledger.close()


def test_a_connection_goes_back_to_the_pool_on_the_callers_thread(pg_schema, monkeypatch):
    """No task for the pool's worker threads per operation (a pool ``reset`` callback makes
    every return one: a thread switch each, and the connection lent again only after it)."""
    from psycopg_pool import ConnectionPool

    tasks: list[str] = []
    run_task = ConnectionPool.run_task
    monkeypatch.setattr(ConnectionPool, "run_task", lambda pool, task: (tasks.append(type(task).__name__),
                                                                         run_task(pool, task))[1])
    ledger = PostgresLedger(pg_schema.url, host_id="host-a")
    try:
        ledger.persist_dispatch(row("deleg_warm"), 1.0)
        tasks.clear()  # opening the pool adds its connections through tasks
        for i in range(5):
            ledger.persist_dispatch(row(f"deleg_{i}"), 1.0)
            ledger.get(f"deleg_{i}")
        assert tasks == []
    finally:
        ledger.close()


def test_finished_children_are_kept_whole_in_the_row_in_the_order_recorded(pg_schema):
    ledger = PostgresLedger(pg_schema.url, host_id="host-a")
    try:
        ledger.persist_dispatch(row("deleg_a"), 1.0)
        for index, summary in ((1, "one"), (0, "zero"), (1, "one again")):
            assert ledger.record_unit_child("deleg_a", {"task_index": index, "summary": summary}, 1.5)
        assert ledger.get("deleg_a").result == {"partial": True, "results": [
            {"task_index": 0, "summary": "zero"}, {"task_index": 1, "summary": "one again"}]}
    finally:
        ledger.close()


def test_a_workers_listener_wakes_for_units_queued_not_for_results_settled(pg_schema):
    ledger = PostgresLedger(pg_schema.url, host_id="host-worker")
    queued: queue.Queue = queue.Queue()
    settled: queue.Queue = queue.Queue()
    listeners = [ledger.listen(queued.put), ledger.listen(settled.put, settled=True)]
    try:
        for listener in listeners:
            assert listener.listening.wait(timeout=10)
        ledger.enqueue_unit(row("deleg_a"), 1.0)
        assert queued.get(timeout=10) == ["deleg_a"]
        assert ledger.claim_queued_unit(1.0, 10).delegation_id == "deleg_a"
        ledger.persist_dispatch_within(row("deleg_a"), 1.0, 10)
        ledger.persist_completion(row("deleg_a"), {"delegation_id": "deleg_a", "status": "completed"}, {}, 2.0)
        assert settled.get(timeout=10) == ["deleg_a"]
        ledger.enqueue_unit(row("deleg_b"), 3.0)  # notified after the completion committed
        assert queued.get(timeout=10) == ["deleg_b"]  # the settled result never reached this listener
        assert settled.empty()  # nor a queued unit the other
    finally:
        for listener in listeners:
            listener.stop()
        ledger.close()
