"""``max_concurrent_children`` holds across hosts for units run where they were dispatched
(``run_on: local``): a dispatch that opens a new slot is admitted only if fewer slots than the
cap run on all hosts sharing the ledger, counted in the same transaction as the insert."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from delegation.ledger.postgres import PostgresLedger
from delegation.ledger.protocol import DispatchRow
from tests.postgres.conftest import LEASE_S, Host, host_home
from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery

pytestmark = pytest.mark.timeout(90)
SESSION = "agent:main:cli:dm:1"


@pytest.fixture
def host_b(tmp_path, monkeypatch, pg_schema):
    """This test process, acting as host B on the same ledger."""
    monkeypatch.setenv("HERMES_HOME", str(host_home(tmp_path, "host-b")))
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", pg_schema.url)
    monkeypatch.setenv("OFFLOAD_HOST_ID", "host-b")
    delivery.reset_for_tests()
    ad._reset_for_tests()
    yield delivery.current_ledger()
    ad._reset_for_tests()
    delivery.reset_for_tests()


def dispatch(release: threading.Event, cap: int) -> dict:
    return ad.dispatch_async_delegation(goal="g", context=None, toolsets=None, role="leaf", model="m",
                                        session_key=SESSION, runner=lambda: release.wait() and {"status": "completed"},
                                        max_async_children=cap)


def test_the_last_slot_taken_on_another_host_is_not_taken_here_until_that_owner_is_gone(
        hosts, tmp_path, pg_schema, host_b):
    owner = Host(tmp_path, "host-a", pg_schema.url, "host_owner.py", "hang 0", "hang 1")
    hosts.append(owner)
    owner.wait_for("D ")  # host A runs one unit (one slot) under its live lease
    release = threading.Event()
    try:
        assert dispatch(release, 2)["status"] == "dispatched"  # 1 on A + this one = the cap of 2
        refused = dispatch(release, 2)
        assert refused["status"] == "rejected"
        assert "2 running on all hosts sharing the ledger" in refused["error"]
        assert ad.active_count() == 1  # the refused unit left no record, slot or row behind
        assert len(host_b.running_rows()) == 2

        owner.signal(signal.SIGKILL)  # A's slot frees once its lease has expired
        deadline = time.monotonic() + LEASE_S * 4
        while (handle := dispatch(release, 2))["status"] != "dispatched":
            assert time.monotonic() < deadline, f"host A's slot never freed: {handle}"
            time.sleep(0.1)
    finally:
        release.set()


def row(did: str) -> DispatchRow:
    return DispatchRow(did, SESSION, 1.0, {"goal": "g"}, owner_pid=1, owner_started_at=1)


def test_two_hosts_racing_for_the_last_slot_never_both_get_it(pg_schema):
    hosts = [PostgresLedger(pg_schema.url, host_id=f"host-{i}") for i in range(2)]
    try:
        for round_ in range(10):
            start, admitted = threading.Barrier(2), []

            def take(i: int) -> None:
                start.wait()
                admitted.append(hosts[i].persist_dispatch_within(row(f"deleg_{round_}_{i}"), 1.0, round_ + 1))
            threads = [threading.Thread(target=take, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert sorted(admitted) == [False, True], f"round {round_}: {admitted}"  # round_ slots were taken
    finally:
        for ledger in hosts:
            ledger.close()
