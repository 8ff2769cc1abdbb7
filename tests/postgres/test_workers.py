"""``delegation.run_on: workers`` and ``offload worker`` on the PostgreSQL ledger.

- With ``run_on: workers`` a background call only queues (no child is built on the parent);
  on SQLite it is refused with the fix (a shared ledger.url).
- 3 ``offload worker`` processes on 3 hosts drain 300 queued units while one is SIGKILLed
  mid-run: every unit is reported to the parent's host exactly once with its real result (the
  dead worker's in-flight units resumed by another worker, their cut model call asked once
  more), no unit runs twice, and the fleet never runs more than ``max_concurrent_children``
  units at once.
- Ctrl-C drains a worker: no new claims, running units finish and are reported, exit 0.
"""
from __future__ import annotations

import json
import queue
import signal
import sys
import threading
import time
from collections import Counter

import pytest

import tools.delegate_tool as dt
from tests.delegate.fakes import FakeParent
from tests.postgres.conftest import Host
from tools import async_delegation_delivery as delivery
from offload.ledger import DispatchRow
from offload.origin import Origin
from offload.subagents.config import DelegationConfig
from offload.subagents.queue import unit_spec

pytestmark = pytest.mark.timeout(180)
SESSION = "agent:main:cli:dm:parent"
FLEET_CAP = 6


@pytest.fixture
def parent_host(tmp_path, monkeypatch, pg_schema):
    """This test process as the parent's host (a consumer of results)."""
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", pg_schema.url)
    monkeypatch.setenv("OFFLOAD_HOST_ID", "host-parent")
    delivery.reset_for_tests()
    yield delivery.current_ledger()
    delivery.reset_for_tests()


def queue_units(ledger, n: int, prefix: str = "deleg_w") -> list[str]:
    ids = [f"{prefix}{i:04d}" for i in range(n)]
    origin = Origin.capture(SESSION, "parent")
    for did in ids:
        unit = dt.Batch(tasks=[dt.TaskArgs(goal=f"goal of {did}")], children=[], parent=None, cfg=DelegationConfig(),
                        creds={"model": "demo-model"}, indexes=[0])
        ledger.enqueue_unit(DispatchRow.of(did, origin, time.time(), unit_spec(unit, origin)), time.time())
    return ids


class CountingModel:
    """The subagents' loopback model: answers ``real:<goal>`` after ``delay_s``, and counts
    requests per goal and the most requests in flight at once."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.active, self.max_active = delay_s, 0, 0
        self.per_goal: Counter = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: dict):
        from offload.testing.demo_script import subagent_goal
        from offload.testing.model_server import text_reply

        goal = subagent_goal(request)
        with self.lock:
            self.per_goal[goal] += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.delay_s)
        finally:
            with self.lock:
                self.active -= 1
        return text_reply(f"real:{goal}")


def start_worker(hosts, tmp_path, url: str, host_id: str, server, concurrency: int) -> Host:
    config = {"model": "demo-model", "base_url": server.url,
              "delegation": {"max_concurrent_children": FLEET_CAP, "resume": "auto"}}
    host = Host(tmp_path, host_id, url, "", argv=[sys.executable, "-m", "offload", "worker", "-c", str(concurrency)],
                config=config)
    hosts.append(host)
    host.wait_for("offload worker on")
    return host


def deliver_all(q: queue.Queue, expected: set[str], deadline_s: float = 120.0) -> tuple[Counter, dict[str, str]]:
    """Act as the parent's consumer: claim and complete each result as it arrives; how often
    each id was delivered, and its reported status."""
    delivered: Counter = Counter()
    statuses: dict[str, str] = {}
    started = time.monotonic()
    while set(delivered) < expected:
        assert time.monotonic() - started < deadline_s, f"{len(expected - set(delivered))} results never arrived"
        try:
            evt = q.get(timeout=1.0)
        except queue.Empty:
            continue
        claim = delivery.claim_event_delivery(evt, "parent")
        if claim is not None and delivery.complete_event_delivery(evt, claim):
            delivered[evt["delegation_id"]] += 1
            statuses[evt["delegation_id"]] = evt["status"]
    return delivered, statuses


def test_run_on_workers_queues_without_building_children_and_needs_a_shared_ledger(monkeypatch, pg_schema):
    monkeypatch.setattr(dt, "_load_config", lambda: {"run_on": "workers"})
    monkeypatch.setattr("offload.context.session_env.async_delivery_supported", lambda: True)
    parent = FakeParent()
    refused = json.loads(dt.delegate_task(goal="summarize the repository", background=True, parent_agent=parent))
    assert refused["status"] == "error" and "ledger.url" in refused["error"] and "run_on local" in refused["error"]

    monkeypatch.setenv("OFFLOAD_LEDGER_URL", pg_schema.url)
    handle = json.loads(dt.delegate_task(tasks=[{"goal": "list the modules"}, {"goal": "count the tests"}], background=True, parent_agent=parent))
    assert (handle["status"], handle["run_on"]) == ("dispatched", "workers"), handle
    row = delivery.current_ledger().get(handle["delegation_id"])
    assert row.state == "queued" and row.task["goals"] == ["list the modules", "count the tests"] and parent.built == []
    assert "api_key" not in json.dumps(row.task)


@pytest.mark.chaos
def test_three_workers_drain_300_units_with_one_killed_and_report_each_exactly_once(
        hosts, tmp_path, pg_schema, parent_host, model_server):
    model = CountingModel(delay_s=0.05)
    server = model_server(model)
    q: queue.Queue = queue.Queue()
    delivery.restore_undelivered_completions(q)  # the parent's consumer listens from here on
    ids = queue_units(parent_host, 300)

    workers = [start_worker(hosts, tmp_path, pg_schema.url, f"host-w{k}", server, concurrency=4) for k in range(3)]
    for _ in range(10):
        workers[0].wait_for("finished ")
    workers[0].signal(signal.SIGKILL)

    delivered, reported = deliver_all(q, set(ids))
    assert set(delivered) == set(ids) and set(delivered.values()) == {1}, "a unit reported twice or never"
    assert model.max_active <= FLEET_CAP, f"{model.max_active} units ran at once; the fleet cap is {FLEET_CAP}"
    assert Counter(reported.values()) == {"completed": 300}, Counter(reported.values())
    resumed = set()
    for did in ids:
        row = parent_host.get(did)
        entry = row.result["results"][0]
        assert row.delivery_state == "delivered" and entry["summary"] == f"real:goal of {did}"
        if entry.get("resumed"):
            resumed.add(f"goal of {did}")
    asked_twice = {goal for goal, n in model.per_goal.items() if n > 1}
    assert max(model.per_goal.values()) <= 2, "a unit's model call was asked more than once again"
    assert asked_twice <= resumed and len(resumed) <= 4, (asked_twice, resumed)  # the killed worker's (-c 4)
    print(f"resumed {len(resumed)} ({len(asked_twice)} asked again), max in flight {model.max_active}")


def test_ctrl_c_drains_a_worker_then_it_exits_0(hosts, tmp_path, pg_schema, parent_host, model_server):
    server = model_server(CountingModel(delay_s=1.0))
    worker = start_worker(hosts, tmp_path, pg_schema.url, "host-w", server, concurrency=2)
    ids = queue_units(parent_host, 2)
    worker.wait_for("started ")
    worker.wait_for("started ")
    worker.signal(signal.SIGINT)
    worker.wait_for("offload worker: draining 2")
    later = queue_units(parent_host, 1, prefix="deleg_late")
    assert worker.proc.wait(timeout=60) == 0
    lines = worker.finish()
    assert sorted(line.split()[1] for line in lines if line.startswith("finished ")) == ids
    assert parent_host.get(later[0]).state == "queued"  # no claim after Ctrl-C
    assert {parent_host.get(d).state for d in ids} == {"completed"}
