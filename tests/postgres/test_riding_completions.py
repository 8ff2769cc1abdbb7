"""A completion rides the next dispatch's round trip on a real server (``postgres.riders``,
issue 31): both writes in one statement and one transaction, each under its own fence; the
completion first, so the slot it frees is free for the dispatch; a rider whose lease is gone
is refused as a write of its own would be; a rider whose row vanished is written whole; and
when the carrier's statement fails the rider writes itself."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from bench.probes import worker_probe
import offload.ledger.postgres.connections as postgres_connections
import offload.ledger.postgres.riders as postgres_riders
from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.postgres.capacity import CAPACITY_LOCK_KEY
from offload.ledger.postgres.lease import TAKEOVER_LOCK
from offload.ledger.protocol import DispatchRow, LedgerError

pytestmark = pytest.mark.timeout(60)
SESSION = "agent:main:cli:dm:1"
T0 = 1_000.0


def row(did: str, **task) -> DispatchRow:
    return DispatchRow(did, SESSION, T0, {"goal": did, **task}, owner_pid=1, owner_started_at=1)


def done(did: str) -> dict:
    return {"delegation_id": did, "status": "completed", "completed_at": T0 + 1}


@pytest.fixture
def ledger(pg_schema, monkeypatch):
    # a rider waits for its carrier, and the last dispatch counts as recent, however slow the machine
    monkeypatch.setattr(postgres_riders, "WAIT_S", 30.0)
    monkeypatch.setattr(postgres_riders, "WINDOW_S", 60.0)
    monkeypatch.setattr(postgres_connections, "_check_if_idle", lambda conn: None)  # no liveness round trips counted
    ledger = PostgresLedger(pg_schema.url, host_id="host-a", heartbeat_s=3600)
    yield ledger
    ledger.close()


def completing(ledger: PostgresLedger, did: str, result: dict | None = None) -> tuple[threading.Thread, list]:
    """``persist_completion`` of ``did`` on another thread, as a unit's own thread makes it;
    returns once it waits for a carrier."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(ledger.persist_completion(row(did), done(did), result or {"summary": did}, T0 + 1))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not ledger._riders._queue:  # no event to wait on: the rider's thread appends, then waits
        assert time.monotonic() < deadline and thread.is_alive(), f"the completion never waited for a carrier: {outcome}"
        time.sleep(0.001)
    return thread, outcome


def stored(url: str, did: str) -> tuple | None:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT state, result_json FROM async_delegations WHERE delegation_id=%s",
                            (did,)).fetchone()


def test_a_completion_rides_the_next_dispatch_in_one_round_trip(ledger, pg_schema, monkeypatch, tmp_path: Path):
    monkeypatch.setattr(psycopg.Connection, "wait", psycopg.Connection.wait)  # restored after the test
    monkeypatch.setattr(psycopg.Connection, "notifies", psycopg.Connection.notifies)
    count = worker_probe.new_count_file(tmp_path / "round-trips")
    worker_probe.install(count)
    ledger.persist_dispatch(row("deleg_a"), T0)  # also: this process is dispatching
    before = worker_probe.read_count(count)
    thread, outcome = completing(ledger, "deleg_a")
    ledger.persist_dispatch(row("deleg_b"), T0)
    thread.join(20)
    assert outcome == [None]
    assert worker_probe.read_count(count) - before == 1  # the dispatch and the completion together
    assert stored(pg_schema.url, "deleg_a") == ("completed", '{"summary":"deleg_a"}')
    assert stored(pg_schema.url, "deleg_b")[0] == "running"
    assert ledger.get("deleg_a").delivery_state == "pending"


def test_the_slot_a_riding_completion_frees_is_free_for_the_dispatch_it_rides(ledger, pg_schema):
    assert ledger.persist_dispatch_within(row("deleg_a"), T0, max_running=1)
    assert not ledger.persist_dispatch_within(row("deleg_full"), T0, max_running=1)  # one slot, taken
    thread, outcome = completing(ledger, "deleg_a")
    assert ledger.persist_dispatch_within(row("deleg_b"), T0, max_running=1)
    thread.join(20)
    assert outcome == [None] and stored(pg_schema.url, "deleg_a")[0] == "completed"


def test_a_rider_whose_lease_is_gone_is_refused_and_the_row_stands(ledger, pg_schema):
    ledger.persist_dispatch(row("deleg_a"), T0)
    token = ledger.lease.current()
    thread, outcome = completing(ledger, "deleg_a")
    with psycopg.connect(pg_schema.url, autocommit=True) as conn:  # a recovering host took the lease over
        conn.execute("DELETE FROM async_delegation_owners WHERE token=%s", (token,))
    ledger.persist_dispatch(row("deleg_b"), T0)  # refused under the old lease, then written under a new one
    thread.join(20)
    assert len(outcome) == 1 and isinstance(outcome[0], LedgerError) and outcome[0].kind == "fenced", outcome
    assert stored(pg_schema.url, "deleg_a")[0] == "running"  # the recovery's to settle, not the fenced owner's
    assert ledger.get("deleg_b").extra["owner_token"] != token


def test_a_rider_whose_row_vanished_is_written_whole(ledger, pg_schema):
    ledger.persist_dispatch(row("deleg_a"), T0)
    with psycopg.connect(pg_schema.url, autocommit=True) as conn:
        conn.execute("DELETE FROM async_delegations WHERE delegation_id='deleg_a'")
    thread, outcome = completing(ledger, "deleg_a")
    ledger.persist_dispatch(row("deleg_b"), T0)
    thread.join(20)
    assert outcome == [None] and stored(pg_schema.url, "deleg_a") == ("completed", '{"summary":"deleg_a"}')


def test_when_the_carriers_statement_fails_the_rider_writes_itself(ledger, pg_schema):
    ledger.persist_dispatch(row("deleg_a"), T0)
    thread, outcome = completing(ledger, "deleg_a")
    broken = DispatchRow("deleg_b", SESSION, None, {"goal": "b"}, owner_pid=1, owner_started_at=1)  # no dispatch time
    with pytest.raises(LedgerError):
        ledger.persist_dispatch(broken, T0)  # NOT NULL refuses the statement: nothing of it commits
    thread.join(20)
    assert outcome == [None] and stored(pg_schema.url, "deleg_a")[0] == "completed"
    assert stored(pg_schema.url, "deleg_b") is None


def test_a_carrier_within_the_capacity_waits_for_its_lock_holding_no_fence(ledger, pg_schema):
    """Locks in the order every claim takes them: the capacity lock, then a fence. A carrier
    that took its rider's fence first and then waited for the capacity could deadlock with a
    claim (capacity held, waiting for a fence) behind a takeover (waiting for that first fence)."""
    from tests.postgres.test_fence_lock import in_thread, wait_until_blocked

    assert ledger.persist_dispatch_within(row("deleg_a"), T0, max_running=10)
    token = ledger.lease.current()
    thread, outcome = completing(ledger, "deleg_a")
    with psycopg.connect(pg_schema.url) as claim, psycopg.connect(pg_schema.url) as takeover:
        claim.execute("SELECT pg_advisory_xact_lock(hashtext(%s || current_schema()))", (CAPACITY_LOCK_KEY,))
        carrier, admitted = in_thread(lambda: ledger.persist_dispatch_within(row("deleg_b"), T0, max_running=10))
        wait_until_blocked(pg_schema.url)  # the carrier waits for the capacity lock
        try_takeover = TAKEOVER_LOCK.replace("pg_advisory_xact_lock", "pg_try_advisory_xact_lock")
        assert takeover.execute(try_takeover, (token,)).fetchone()[0], "the carrier holds its rider's fence"
        takeover.rollback()
        claim.rollback()  # the capacity is free again: the carrier goes on
        carrier.join(20)
    thread.join(20)
    assert admitted == [True] and outcome == [None]
    assert stored(pg_schema.url, "deleg_a")[0] == "completed" and stored(pg_schema.url, "deleg_b")[0] == "running"
