"""Cross-host delivery on the PostgreSQL ledger: a result settled on one host reaches the
consumers on others through LISTEN/NOTIFY (no polling loop), claims let exactly one of them
deliver it, a consumer that dies mid-delivery leaves it to another as soon as that one can tell
(its pid on the same host, its lease on another; not the claim lease),
and a listener whose connection is terminated misses nothing.
"""
from __future__ import annotations

import time
from collections import Counter

import psycopg
import pytest

from tests.postgres.conftest import Host
from offload.ledger import DispatchRow
from offload.ledger.postgres.ledger import PostgresLedger

pytestmark = pytest.mark.timeout(120)
NOTIFY_ONLY_S = 3600.0  # sweep interval and claim lease so long that only notifications can deliver


def produce(url: str, ids: list[str]) -> None:
    """Host C settles one result per id (it never consumes them itself)."""
    ledger = PostgresLedger(url, host_id="host-c")
    try:
        for did in ids:
            row = DispatchRow(did, "agent:main:telegram:dm:42", time.time(), {"goal": did})
            ledger.persist_dispatch(row, time.time())
            event = {"type": "async_delegation", "delegation_id": did, "status": "completed",
                     "session_key": row.origin_session, "summary": f"result of {did}"}
            ledger.persist_completion(row, event, {"status": "completed", "summary": event["summary"]}, time.time())
    finally:
        ledger.close()


def wait_delivered(url: str, expected: int, deadline_s: float = 60.0) -> None:
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            done = conn.execute("SELECT count(*) FROM async_delegations WHERE delivery_state='delivered'").fetchone()[0]
            if done >= expected:
                return
            assert time.monotonic() - started < deadline_s, f"only {done}/{expected} delivered"
            time.sleep(0.1)


def consumer(hosts, tmp_path, url: str, host_id: str, mode: str = "deliver", claim_lease_s: float = NOTIFY_ONLY_S,
             sweep_s: float = NOTIFY_ONLY_S) -> Host:
    host = Host(tmp_path, host_id, url, "host_consumer.py", mode, str(claim_lease_s), str(sweep_s))
    hosts.append(host)
    host.wait_for("LISTENING")
    return host


def tagged(lines: list[str], tag: str) -> Counter:
    return Counter(line.split()[1] for line in lines if line.startswith(tag + " "))


def test_two_consumers_on_two_hosts_deliver_each_of_1000_results_exactly_once(hosts, tmp_path, pg_schema):
    a = consumer(hosts, tmp_path, pg_schema.url, "host-a")
    b = consumer(hosts, tmp_path, pg_schema.url, "host-b")
    ids = [f"deleg_x{i:04d}" for i in range(1000)]

    produce(pg_schema.url, ids)
    wait_delivered(pg_schema.url, len(ids))

    lines_a, lines_b = a.finish(), b.finish()
    delivered = tagged(lines_a, "D") + tagged(lines_b, "D")
    claimed = tagged(lines_a, "C") + tagged(lines_b, "C")
    assert sorted(delivered) == ids and set(delivered.values()) == {1}, "a result delivered twice or never"
    assert claimed == delivered  # no claim was ever granted twice
    print(f"host-a delivered {len(tagged(lines_a, 'D'))}, host-b {len(tagged(lines_b, 'D'))}")


def test_a_consumer_that_dies_mid_delivery_on_another_host_leaves_the_result_once_its_lease_expires(
        hosts, tmp_path, pg_schema):
    from tests.postgres.conftest import LEASE_S

    dying = consumer(hosts, tmp_path, pg_schema.url, "host-a", "die-after-claim", NOTIFY_ONLY_S, 0.2)
    survivor = consumer(hosts, tmp_path, pg_schema.url, "host-b", "deliver", NOTIFY_ONLY_S, 0.2)
    produce(pg_schema.url, ["deleg_orphan"])
    dying.wait_for("C deleg_orphan", timeout_s=30)
    dying.finish()  # SIGKILL: host B cannot see its pid, only its lease lapse
    killed_at = time.monotonic()

    survivor.wait_for("D deleg_orphan", timeout_s=LEASE_S + 10)  # the claim lease is an hour
    assert time.monotonic() - killed_at >= LEASE_S * 0.5  # not before its lease could have lapsed
    produce(pg_schema.url, ["deleg_after"])  # and it keeps delivering new results
    survivor.wait_for("D deleg_after")


def test_a_consumer_that_dies_mid_delivery_leaves_the_result_to_one_on_its_host_at_once(hosts, tmp_path, pg_schema):
    dying = consumer(hosts, tmp_path, pg_schema.url, "host-a", "die-after-claim", NOTIFY_ONLY_S, 0.2)
    produce(pg_schema.url, ["deleg_orphan"])
    dying.wait_for("C deleg_orphan")
    dying.finish()  # SIGKILL; a consumer on the same host sees its pid gone
    killed_at = time.monotonic()

    survivor = consumer(hosts, tmp_path, pg_schema.url, "host-a", "deliver", NOTIFY_ONLY_S, 0.2)
    survivor.wait_for("D deleg_orphan", timeout_s=10)
    assert time.monotonic() - killed_at < 10


def test_a_terminated_listener_connection_reconnects_and_misses_nothing(hosts, tmp_path, pg_schema):
    host = consumer(hosts, tmp_path, pg_schema.url, "host-a")
    with psycopg.connect(pg_schema.url, autocommit=True) as conn:
        killed = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                              " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                              " AND query LIKE 'LISTEN%'").fetchone()[0]
    assert killed >= 1
    ids = [f"deleg_r{i:03d}" for i in range(50)]
    produce(pg_schema.url, ids)  # some settle before the listener is back: their notifications are lost
    wait_delivered(pg_schema.url, len(ids))
    assert sorted(tagged(host.finish(), "D")) == ids
