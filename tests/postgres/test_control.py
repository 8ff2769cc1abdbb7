"""Control requests across hosts on the PostgreSQL ledger: ``offload stop`` on host A reaches
a unit that an ``offload worker`` runs on host B, through the ledger (a LISTEN/NOTIFY wake),
and the requester sees the row leave ``running``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from offload.testing.model_server import hang_reply
from tests.postgres.conftest import ROOT, host_home
from tests.postgres.test_workers import SESSION, parent_host, queue_units, start_worker  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(120)


def offload_on_host(tmp_path, url: str, host_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(host_home(tmp_path, host_id)), "OFFLOAD_LEDGER_URL": url,
           "OFFLOAD_HOST_ID": host_id, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "offload", *args], env=env, cwd=str(ROOT), capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def wait_running(ledger, delegation_id: str, deadline_s: float = 60.0) -> None:
    started = time.monotonic()
    while (row := ledger.get(delegation_id)) is None or row.state != "running":
        assert time.monotonic() - started < deadline_s, f"{delegation_id} never ran: {row}"
        time.sleep(0.05)


def test_stop_on_host_a_interrupts_a_unit_a_worker_runs_on_host_b(hosts, tmp_path, pg_schema, parent_host,
                                                                   model_server):
    server = model_server(lambda request: hang_reply("working…"))
    worker = start_worker(hosts, tmp_path, pg_schema.url, "host-b", server, concurrency=1)
    [did] = queue_units(parent_host, 1, prefix="deleg_stop")
    worker.wait_for(f"started {did}")
    assert server.wait_for_requests(1, timeout_s=30)  # the child hangs mid-stream on host B

    stopped = offload_on_host(tmp_path, pg_schema.url, "host-a", "stop", did, "--wait", "30")
    assert stopped.returncode == 0, stopped
    assert f"stopped {did}" in stopped.stdout
    assert worker.wait_for(f"finished {did}").split()[2] in ("interrupted", "error")
    row = parent_host.get(did)
    assert row.state != "running" and row.result["results"][0]["status"] == "interrupted"
    assert parent_host.take_control([did], time.time()) == []  # taken by the worker, not left behind


def test_stop_of_a_unit_whose_owner_host_lease_expired_says_it_exited(hosts, tmp_path, pg_schema, parent_host,
                                                                      model_server):
    server = model_server(lambda request: hang_reply("working…"))
    worker = start_worker(hosts, tmp_path, pg_schema.url, "host-b", server, concurrency=1)
    [did] = queue_units(parent_host, 1, prefix="deleg_gone")
    worker.wait_for(f"started {did}")
    worker.stop()  # SIGKILL: its lease runs out on the database clock
    started = time.monotonic()
    while (parent_host.get(did).extra or {}).get("lease_live"):
        assert time.monotonic() - started < 30, "the killed worker's lease never expired"
        time.sleep(0.1)
    refused = offload_on_host(tmp_path, pg_schema.url, "host-a", "stop", did, "--wait", "1")
    assert refused.returncode == 2 and "exited" in refused.stderr and "host-b" in refused.stderr, refused


def test_a_request_on_any_host_wakes_the_owners_control_listener(pg_schema):
    import threading

    from offload.ledger import open_ledger

    owner, requester = open_ledger(pg_schema.url, host_id="host-b"), open_ledger(pg_schema.url, host_id="host-a")
    woken: list = []
    arrived = threading.Event()
    listener = owner.watch_control(lambda ids: (woken.append(ids), arrived.set()))
    try:
        assert listener.listening.wait(10)
        requester.request_control("deleg_x", "interrupt", time.time(), time.time() + 60)
        assert arrived.wait(10) and woken == [["deleg_x"]]
    finally:
        listener.stop()
        owner.close()
        requester.close()


def test_agents_on_host_a_shows_the_activity_of_a_unit_a_worker_runs_on_host_b(hosts, tmp_path, pg_schema,
                                                                                parent_host, model_server):
    server = model_server(lambda request: hang_reply("working…"))
    worker = start_worker(hosts, tmp_path, pg_schema.url, "host-b", server, concurrency=1)
    [did] = queue_units(parent_host, 1, prefix="deleg_act")
    worker.wait_for(f"started {did}")
    assert server.wait_for_requests(1, timeout_s=30)  # the child's first model call is in flight

    deadline = time.monotonic() + 30
    while True:  # the worker publishes on its own schedule (every couple of seconds): poll
        listed = offload_on_host(tmp_path, pg_schema.url, "host-a", "agents", "--json")
        [row] = [r for r in json.loads(listed.stdout)["running"] if r["id"] == did]
        if row["children"][0]["api_calls"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert row["owner_host"] == "host-b" and row["owner"] == "running", row
    assert row["children"][0]["api_calls"] >= 0 and row["activity_age_s"] is not None, row
    assert row["stall_clock_s"] is not None
