"""Every connection of the PostgreSQL ledger terminated mid-run (``pg_terminate_backend``, as
a failover or an admin would): the engine keeps running, the pool reconnects, and no result
is lost -- each unit's terminal row is in the database afterwards."""
from __future__ import annotations

import threading

import psycopg
import pytest

from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from tools.process_registry import process_registry

pytestmark = pytest.mark.timeout(90)
UNITS = 20


def terminate_every_other_backend(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]


def test_terminating_every_connection_mid_run_loses_no_result(monkeypatch, pg_schema):
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", pg_schema.url)
    delivery.reset_for_tests()
    ad._reset_for_tests()
    go = threading.Event()

    def runner(i: int):
        def run() -> dict:
            go.wait()
            return {"status": "completed", "summary": f"done {i}"}
        return run

    ids = [ad.dispatch_async_delegation(goal=f"g{i}", context=None, toolsets=None, role="leaf", model="m",
                                        session_key="agent:main:cli:dm:1", runner=runner(i),
                                        max_async_children=UNITS)["delegation_id"] for i in range(UNITS)]
    ledger = delivery.current_ledger()
    assert {ledger.get(d).state for d in ids} == {"running"}

    assert terminate_every_other_backend(pg_schema.url) >= 1  # the pool's connections, mid-run
    go.set()
    events = [process_registry.completion_queue.get(timeout=30) for _ in ids]

    assert sorted(e["delegation_id"] for e in events) == sorted(ids)
    rows = [ledger.get(d) for d in ids]  # through the same (reconnected) pool
    assert {(r.state, r.delivery_state) for r in rows} == {("completed", "pending")}
    assert sorted(r.result["summary"] for r in rows) == sorted(f"done {i}" for i in range(UNITS))
    ad._reset_for_tests()
