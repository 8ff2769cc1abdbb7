"""The lease fence on a real server: every fenced write takes its lease's fence lock shared
(an advisory lock, nothing written), and whoever deletes a lease takes it exclusive first
(``offload.ledger.postgres.lease``). So a write after a takeover is refused, a takeover waits
for a write in flight (and then finds the row no longer running), and a write that starts
while a takeover is open waits for it and is then refused."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import psycopg
import pytest

from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.postgres.lease import FENCE_LOCK
from offload.ledger.protocol import DispatchRow, LedgerError

pytestmark = pytest.mark.timeout(60)
SESSION = "agent:main:telegram:dm:1"
T0 = 1_000.0


def row(did: str) -> DispatchRow:
    return DispatchRow(did, SESSION, T0, {"goal": "g"}, owner_pid=1, owner_started_at=1)


@pytest.fixture
def hosts(pg_schema):
    owner = PostgresLedger(pg_schema.url, host_id="host-owner", heartbeat_s=3600)
    rescuer = PostgresLedger(pg_schema.url, host_id="host-rescuer", heartbeat_s=3600)
    yield owner, rescuer
    owner.close()
    rescuer.close()


def expire(url: str, token: int) -> None:
    """The owner's lease runs out (as if it had been paused past it)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE async_delegation_owners SET expires_at = 0 WHERE token = %s", (token,))


def dispatched_then_expired(owner: PostgresLedger, url: str, *ids: str) -> int:
    """``ids`` dispatched under the owner's lease, then the lease run out: its token."""
    for did in ids:
        owner.persist_dispatch(row(did), T0)
    token = owner.lease.current()
    expire(url, token)
    return token


def state(url: str, did: str) -> tuple[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT state, event_json FROM async_delegations WHERE delegation_id=%s",
                            (did,)).fetchone()


def wait_until_blocked(url: str, waiters: int = 1, timeout_s: float = 20.0) -> None:
    """Until ``waiters`` sessions wait for an advisory lock (a fence lock held elsewhere)."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND NOT granted"
                           " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                           ).fetchone()[0] < waiters:
            assert time.monotonic() < deadline, "nobody came to wait for the fence lock"
            time.sleep(0.01)  # polling the server's lock table: no event to wait on across sessions


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_write_after_a_takeover_is_refused(hosts, pg_schema):
    owner, rescuer = hosts
    token = dispatched_then_expired(owner, pg_schema.url, "deleg_a", "deleg_b")
    assert rescuer.settle_abandoned("deleg_a", {"status": "unknown"}, {"status": "unknown"}, T0 + 9) is True

    assert owner.record_unit_child("deleg_b", {"index": 0, "status": "completed"}, T0 + 10) is False
    with pytest.raises(LedgerError) as refused:
        owner.persist_completion(row("deleg_b"), {"status": "completed"}, {"status": "completed"}, T0 + 10)
    assert refused.value.kind == "fenced"
    assert state(pg_schema.url, "deleg_a")[0] == "unknown"
    assert state(pg_schema.url, "deleg_b") == ("running", None)  # left for the next recovery
    owner.persist_dispatch(row("deleg_c"), T0 + 11)  # new work takes a new lease
    assert owner.lease.current() != token


def test_a_takeover_waits_for_a_write_in_flight_and_leaves_its_result_standing(hosts, pg_schema):
    owner, rescuer = hosts
    token = dispatched_then_expired(owner, pg_schema.url, "deleg_a")
    # The owner's completion is in flight: it holds the fence lock shared and has written.
    with psycopg.connect(pg_schema.url) as writer:
        writer.execute(FENCE_LOCK, (token,))
        writer.execute("UPDATE async_delegations SET state='completed', event_json='{}' WHERE delegation_id=%s",
                       ("deleg_a",))
        thread, settled = in_thread(lambda: rescuer.settle_abandoned(
            "deleg_a", {"status": "unknown"}, {"status": "unknown"}, T0 + 9))
        wait_until_blocked(pg_schema.url)
        assert thread.is_alive() and settled == []
        writer.commit()
    thread.join(30)
    assert settled == [False]  # it read the row after the owner's commit: no longer running
    assert state(pg_schema.url, "deleg_a") == ("completed", "{}")


def test_a_write_that_starts_during_a_takeover_waits_for_it_and_is_refused(hosts, pg_schema):
    owner, rescuer = hosts
    token = dispatched_then_expired(owner, pg_schema.url, "deleg_a", "deleg_b")
    with psycopg.connect(pg_schema.url) as takeover:  # the rescuer's settle, open: lease deleted, not committed
        assert rescuer._revoke_expired(takeover, token) is True
        thread, completed = in_thread(lambda: owner.persist_completion(
            row("deleg_b"), {"status": "completed"}, {"status": "completed"}, T0 + 10))
        child_thread, recorded = in_thread(lambda: owner.record_unit_child(
            "deleg_a", {"index": 0, "status": "completed"}, T0 + 10))
        wait_until_blocked(pg_schema.url, waiters=2)
        assert thread.is_alive() and child_thread.is_alive()
        takeover.commit()
    thread.join(30)
    child_thread.join(30)
    assert isinstance(completed[0], LedgerError) and completed[0].kind == "fenced"
    assert recorded == [False]
    assert state(pg_schema.url, "deleg_b") == ("running", None)


def test_a_fenced_write_takes_no_row_lock_on_the_lease(hosts, pg_schema):
    """The fence writes nothing: the lease row keeps its version (no tuple lock) across a
    dispatch, a finished child and a completion."""
    owner, _ = hosts
    owner.persist_dispatch(row("deleg_a"), T0)
    token = owner.lease.current()

    def lease_version() -> tuple:
        with psycopg.connect(pg_schema.url, autocommit=True) as conn:
            return conn.execute("SELECT ctid, xmax FROM async_delegation_owners WHERE token=%s", (token,)).fetchone()
    before = lease_version()
    owner.persist_dispatch(row("deleg_b"), T0)
    assert owner.record_unit_child("deleg_b", {"index": 0, "status": "completed"}, T0 + 1) is True
    owner.persist_completion(row("deleg_b"), {"status": "completed"}, {"status": "completed"}, T0 + 2)
    assert lease_version() == before
