"""``max_concurrent_children`` holds across hosts for units run where they were dispatched
(``run_on: local``): a dispatch that opens a new slot is admitted only if fewer slots than the
cap run on all hosts sharing the ledger, counted in the same transaction as the insert. Local
units and ``offload worker`` claims draw from that one budget, a worker's claim being its
unit's admission; a refused call behaves as on one machine (it runs synchronously with the
same note)."""
from __future__ import annotations

import json
import signal
import sys
import threading
import time

import psycopg
import pytest

import tools.delegate_tool as dt
from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.protocol import DispatchRow
from offload.testing.model_server import text_reply
from tests.delegate.fakes import FakeParent
from tests.engine.conftest import wait_event
from tests.postgres.conftest import LEASE_S, Host
from tests.postgres.test_workers import queue_units
from tools import async_delegation as ad

pytestmark = pytest.mark.timeout(90)
SESSION = "agent:main:cli:dm:1"


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


def delegate_in_background(monkeypatch, cap: int, goal: str, parent: FakeParent | None = None) -> dict:
    """One ``delegate_task`` call as a parent agent makes it, with ``max_concurrent_children=cap``."""
    monkeypatch.setattr(dt, "_load_config", lambda: {"max_concurrent_children": cap, "at_capacity": "inline"})
    return json.loads(dt.delegate_task(goal=goal, background=True, parent_agent=parent or FakeParent()))


def test_a_worker_and_a_local_host_draw_from_one_budget(hosts, tmp_path, pg_schema, host_b, model_server,
                                                        monkeypatch):
    answer = threading.Event()
    server = model_server(lambda request: (answer.wait(60), text_reply("real"))[1])
    worker = Host(tmp_path, "host-a", pg_schema.url, "", argv=[sys.executable, "-m", "offload", "worker", "-c", "1"],
                  config={"model": "demo-model", "base_url": server.url, "delegation": {"max_concurrent_children": 1}})
    hosts.append(worker)
    worker.wait_for("offload worker on")
    release = threading.Event()
    try:
        [first] = queue_units(host_b, 1, prefix="deleg_cap_a")
        worker.wait_for(f"started {first}")  # its claim is its admission: not refused against itself
        refused = dispatch(release, 1)  # the worker's unit on host A holds the one slot
        assert refused["status"] == "rejected" and "1 running on all hosts sharing the ledger" in refused["error"]
        # What the parent agent sees is what it sees on one machine when the pool is full.
        inline = delegate_in_background(monkeypatch, 1, "overflow")
        assert inline["mode"] == "sync" and "max_concurrent_children=1" in inline["note"]
        assert inline["results"][0]["summary"] == "done: overflow"

        answer.set()
        worker.wait_for(f"finished {first}")
        held = FakeParent(lambda child: (release.wait(60), {"final_response": "x", "completed": True})[1])
        local = delegate_in_background(monkeypatch, 1, "local", held)
        assert local["status"] == "dispatched"
        [second] = queue_units(host_b, 1, prefix="deleg_cap_b")
        assert host_b.claim_queued_unit(time.time(), 1) is None  # the local unit on host B holds the slot
        assert host_b.get(second).state == "queued"
    finally:
        release.set()
        answer.set()
    wait_event(local["delegation_id"], timeout_s=30)
    worker.wait_for(f"started {second}")  # the slot is free again once host B's unit finished


def test_a_claimed_unit_starts_on_its_claim_and_counts_against_every_other_host(pg_schema):
    worker, local = (PostgresLedger(pg_schema.url, host_id=h) for h in ("host-worker", "host-local"))
    try:
        worker.enqueue_unit(row("deleg_queued"), 1.0)
        claimed = worker.claim_queued_unit(1.0, 1)
        assert claimed is not None and claimed.delegation_id == "deleg_queued"
        assert (claimed.state, claimed.task, claimed.extra["owner_host"], claimed.extra["lease_live"]) == (
            "running", {"goal": "g"}, "host-worker", True)  # the claimed row as a read of it returns it
        assert claimed.extra["owner_token"] == worker.get("deleg_queued").extra["owner_token"]
        assert worker.persist_dispatch_within(row("deleg_queued", started=1), 1.0, 1) is True  # asks nothing
        assert worker.get("deleg_queued").task == {"goal": "g", "started": 1}  # the engine's row, same token
        assert local.persist_dispatch_within(row("deleg_local"), 1.0, 1) is False
        assert local.persist_dispatch_within(row("deleg_local"), 1.0, 2) is True
        worker.enqueue_unit(row("deleg_queued_2"), 1.0)
        assert worker.claim_queued_unit(1.0, 2) is None  # 2 slots run: one claimed, one local
        assert worker.persist_dispatch_within(row("deleg_fresh"), 1.0, 3) is True  # a new unit is asked
        assert worker.persist_dispatch_within(row("deleg_fresh_2"), 1.0, 3) is False
    finally:
        worker.close()
        local.close()


def test_starting_a_claimed_unit_never_revives_a_claim_recovered_meanwhile(pg_schema):
    worker = PostgresLedger(pg_schema.url, host_id="host-worker")
    try:
        worker.enqueue_unit(row("deleg_queued"), 1.0)
        assert worker.claim_queued_unit(1.0, 1) is not None
        with psycopg.connect(pg_schema.url, autocommit=True) as conn:  # another host recovered it
            conn.execute("UPDATE async_delegations SET state='completed' WHERE delegation_id='deleg_queued'")
        assert worker.persist_dispatch_within(row("deleg_queued", started=1), 1.0, 1) is True
        assert (worker.get("deleg_queued").state, worker.get("deleg_queued").task) == ("completed", {"goal": "g"})
    finally:
        worker.close()


def test_the_units_of_one_local_call_are_one_slot_to_worker_claims_too(pg_schema):
    worker, local = (PostgresLedger(pg_schema.url, host_id=h) for h in ("host-worker", "host-local"))
    try:
        assert local.persist_dispatch_within(row("deleg_call-1"), 1.0, 2) is True
        local.persist_dispatch(row("deleg_call-2", slot_key="deleg_call-1"), 1.0)  # shares its call's slot
        worker.enqueue_unit(row("deleg_queued"), 1.0)
        assert worker.claim_queued_unit(1.0, 2) is not None  # 1 slot ran, not 2
        worker.enqueue_unit(row("deleg_queued_2"), 1.0)
        assert worker.claim_queued_unit(1.0, 2) is None
    finally:
        worker.close()
        local.close()


def row(did: str, **task) -> DispatchRow:
    return DispatchRow(did, SESSION, 1.0, {"goal": "g", **task}, owner_pid=1, owner_started_at=1)


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
