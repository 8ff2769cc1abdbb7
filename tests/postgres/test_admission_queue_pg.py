"""The admission queue on a shared PostgreSQL ledger: a unit queued at capacity is held under
its owner's lease, so an ``offload worker`` (or any other host) does not take it while that
owner lives, and takes it once the lease is gone (the owner died); a unit queued for the
workers has no owner and is taken at once. First queued, first taken."""
from __future__ import annotations

import pytest

from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.protocol import DispatchRow

pytestmark = pytest.mark.timeout(60)


def row(did: str, at: float) -> DispatchRow:
    return DispatchRow(did, "agent:main:cli:dm:1", at, {"goal": did}, owner_pid=4242, owner_started_at=1)


def test_a_worker_takes_no_held_row_of_a_live_owner_but_takes_it_once_that_owner_is_gone(pg_schema):
    owner = PostgresLedger(pg_schema.url, host_id="host-owner", heartbeat_s=3600)
    worker = PostgresLedger(pg_schema.url, host_id="host-worker", heartbeat_s=3600)
    try:
        assert owner.enqueue_unit(row("deleg_held", 1.0), 1.0, held=True)
        assert worker.enqueue_unit(row("deleg_for_workers", 2.0), 2.0)  # no owner: for any worker
        taken = worker.claim_queued_unit(10.0, 10)
        assert taken is not None and taken.delegation_id == "deleg_for_workers"
        assert worker.claim_queued_unit(11.0, 10) is None  # the older held row is its live owner's
        assert [r.delegation_id for r in worker.queued_rows()] == ["deleg_held"]

        owner.lease.release()  # the owner is gone (as when its lease expires after it died)
        taken = worker.claim_queued_unit(12.0, 10)
        assert taken is not None and taken.delegation_id == "deleg_held" and taken.state == "running"
        assert taken.extra["owner_host"] == "host-worker" and worker.queued_rows() == []
    finally:
        owner.close()
        worker.close()


def test_the_owner_takes_its_own_held_row_back_by_id_under_its_lease(pg_schema):
    owner = PostgresLedger(pg_schema.url, host_id="host-owner", heartbeat_s=3600)
    try:
        owner.enqueue_unit(row("deleg_mine", 1.0), 1.0, held=True)
        taken = owner.claim_queued("deleg_mine", 5.0, (4242, 1), 10)
        assert taken is not None and taken.extra["lease_live"] is True and taken.extra["owner_host"] == "host-owner"
        assert owner.claim_queued("deleg_mine", 6.0, (4242, 1), 10) is None
    finally:
        owner.close()
