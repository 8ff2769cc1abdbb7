"""Writes the PostgreSQL ledger could not make while its server was unreachable are kept in
order and replayed once it is back -- idempotent, and fenced: a replay never overwrites what a
host that recovered the unit (its owner's lease expired during the outage) wrote meanwhile.

"Unreachable" is simulated at the ledger's connection step (``_run``), so each test chooses
exactly which write fails and whether it failed before or after it committed; the real server
restart is in ``test_server_restart.py``.
"""
from __future__ import annotations

import time

import pytest

from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.protocol import DispatchRow, LedgerError
from offload.testing import FakeClock

pytestmark = pytest.mark.timeout(60)
T0 = 1_700_000_000.0
DOWN = LedgerError("the ledger database X is unreachable (connection refused)", kind="unreachable")


class Link:
    """Between a ledger and its server: ``up``, ``down`` (nothing reaches the server) or
    ``ack_lost`` (the write commits, then the connection drops before the answer)."""

    def __init__(self, ledger: PostgresLedger, monkeypatch) -> None:
        self.state, real = "up", ledger._run

        def run(fn, **kwargs):
            if self.state == "down":
                raise DOWN
            outcome = real(fn, **kwargs)
            if self.state == "ack_lost":
                raise DOWN
            return outcome
        monkeypatch.setattr(ledger, "_run", run)


@pytest.fixture
def ledgers(pg_schema):
    opened: list[PostgresLedger] = []

    def open_one(host_id: str, lease_s: float = 60.0) -> PostgresLedger:
        opened.append(PostgresLedger(pg_schema.url, host_id=host_id, lease_s=lease_s, heartbeat_s=3600))
        return opened[-1]
    yield open_one
    for ledger in opened:
        ledger.close()


def row(did: str = "deleg_1") -> DispatchRow:
    return DispatchRow(did, "agent:main:cli:dm:1", T0, {"goal": "g"}, owner_pid=1, owner_started_at=1)


def event(did: str, status: str = "completed") -> dict:
    return {"delegation_id": did, "status": status, "completed_at": T0 + 5, "summary": "real result"}


def down_then(ledger: PostgresLedger, write) -> None:
    with pytest.raises(LedgerError) as caught:
        write()
    assert caught.value.kind == "unreachable"


def test_a_units_writes_made_while_down_reach_the_database_in_order_once_it_is_back(ledgers, monkeypatch):
    a = ledgers("host-a")
    link = Link(a, monkeypatch)
    link.state = "down"
    down_then(a, lambda: a.persist_dispatch(row(), T0))
    down_then(a, lambda: a.record_unit_child("deleg_1", {"task_index": 0, "summary": "child 0"}, T0 + 1))
    down_then(a, lambda: a.persist_completion(row(), event("deleg_1"), {"summary": "real result"}, T0 + 5))
    down_then(a, lambda: a.complete_delivery("deleg_1", "claim granted in memory", T0 + 6))
    assert len(a.outbox) == 4

    link.state = "up"
    assert a.outbox.flush() is True
    got = a.get("deleg_1")
    assert (got.state, got.result, got.delivery_state) == ("completed", {"summary": "real result"}, "delivered")
    assert got.extra["owner_token"] == a.lease.current()


def test_a_write_after_the_outage_waits_for_the_kept_ones_and_reads_see_them(ledgers, monkeypatch):
    a = ledgers("host-a")
    link = Link(a, monkeypatch)
    link.state = "down"
    down_then(a, lambda: a.persist_dispatch(row(), T0))
    link.state = "up"
    assert a.record_unit_child("deleg_1", {"task_index": 0, "summary": "child 0"}, T0 + 1) is True
    assert a.get("deleg_1").result == {"results": [{"task_index": 0, "summary": "child 0"}], "partial": True}
    assert len(a.outbox) == 0


def wait_lease_expired(ledger: PostgresLedger, did: str) -> None:
    deadline = time.monotonic() + 20
    while ledger.get(did).extra["lease_live"]:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.05)


def test_a_unit_recovered_elsewhere_during_the_outage_is_not_overwritten_by_the_replay(ledgers, monkeypatch):
    a, b = ledgers("host-a", lease_s=0.5), ledgers("host-b")
    link = Link(a, monkeypatch)
    a.persist_dispatch(row(), T0)
    link.state = "down"
    down_then(a, lambda: a.record_unit_child("deleg_1", {"task_index": 0, "summary": "late"}, T0 + 1))
    down_then(a, lambda: a.persist_completion(row(), event("deleg_1"), {"summary": "late result"}, T0 + 5))

    wait_lease_expired(b, "deleg_1")  # the owner could not renew: host B recovers the unit
    assert b.settle_abandoned("deleg_1", event("deleg_1", "unknown"), {"summary": "recovered"}, T0 + 10) is True

    link.state = "up"
    assert a.outbox.flush() is True  # both replays are refused (fenced) and dropped
    got = b.get("deleg_1")
    assert (got.state, got.result) == ("unknown", {"summary": "recovered"})
    assert len(a.outbox) == 0


def test_a_dispatch_that_committed_before_its_answer_was_lost_is_not_replaced_on_replay(ledgers, monkeypatch):
    a, b = ledgers("host-a", lease_s=0.5), ledgers("host-b")
    link = Link(a, monkeypatch)
    link.state = "ack_lost"
    down_then(a, lambda: a.persist_dispatch(row(), T0))  # it did commit, under the lease's token
    link.state = "down"
    down_then(a, lambda: a.persist_completion(row(), event("deleg_1"), {"summary": "late result"}, T0 + 5))

    wait_lease_expired(b, "deleg_1")
    assert b.settle_abandoned("deleg_1", event("deleg_1", "unknown"), {"summary": "recovered"}, T0 + 10) is True

    link.state = "up"
    assert a.outbox.flush() is True
    got = b.get("deleg_1")
    assert (got.state, got.result) == ("unknown", {"summary": "recovered"})  # not reset to running, not overwritten


def test_a_completion_replayed_twice_is_applied_once(ledgers, monkeypatch):
    a = ledgers("host-a")
    link = Link(a, monkeypatch)
    a.persist_dispatch(row(), T0)
    link.state = "ack_lost"
    down_then(a, lambda: a.persist_completion(row(), event("deleg_1"), {"summary": "real result"}, T0 + 5))
    link.state = "up"
    assert a.claim_delivery("deleg_1", "C", T0 + 6, 300) is True  # a claim first writes what waits
    assert len(a.outbox) == 0
    got = a.get("deleg_1")
    assert (got.state, got.delivery_state, got.delivery_claim) == ("completed", "pending", "C")


def test_the_ledgers_loops_run_on_the_clock_it_is_given_and_close_stops_them(pg_schema):
    clock = FakeClock()
    ledger = PostgresLedger(pg_schema.url, host_id="h", heartbeat_s=10, clock=clock)
    try:
        assert [loop.running for loop in ledger.loops()] == [False, False]  # nothing started before work
        ledger.persist_dispatch(row(), T0)
        token = ledger.lease.current()

        def expires_at():
            return ledger._run(lambda conn: conn.execute(
                "SELECT expires_at FROM async_delegation_owners WHERE token=%s", (token,)).fetchone()[0])
        before = expires_at()
        assert clock.scheduled() == {"offload-ledger-lease": 10.0}
        clock.advance(10)  # one heartbeat, on the database's clock
        assert expires_at() > before
    finally:
        ledger.close()
    assert not any(loop.running for loop in ledger.loops()) and clock.scheduled() == {}
