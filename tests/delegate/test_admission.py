"""The admission queue (issue 29 item 3): at capacity, a background ``delegate_task`` call waits
its turn as ``queued`` ledger rows (``delegation.at_capacity: queue``, the default) and starts
in order when a slot frees; ``refuse`` and ``inline`` keep the other behaviours; the queue's
bounds refuse with the key's name. Driven through delegate_task with fake children."""
from __future__ import annotations

import json
import threading
import time

import pytest

import tools.delegate_tool as dt
from offload.engine.liveness import current_owner
from offload.ledger import DispatchRow
from tests.delegate.fakes import FakeChild, FakeParent
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from tools import async_delegation as ad

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


def call(cfg: dict, monkeypatch, **kw) -> dict:
    monkeypatch.setattr(dt, "_load_config", lambda: cfg)
    kw.setdefault("parent_agent", FakeParent())
    return json.loads(dt.delegate_task(**kw))


class Gate:
    """A child behaviour that records the goals in the order they start and waits for a release."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []

    def __call__(self, child: FakeChild) -> dict:
        self.started.append(child.goal)
        assert self.release.wait(10), "the test never released the child"
        return {"final_response": f"done: {child.goal}", "completed": True, "api_calls": 1}


def state(delegation_id: str) -> str:
    return ad.get_durable_delegation(delegation_id)["state"]


def test_a_call_at_capacity_is_queued_in_the_ledger_and_starts_when_the_slot_frees(monkeypatch):
    cfg = {"max_concurrent_children": 1}
    gate = Gate()
    first = call(cfg, monkeypatch, goal="hold the only slot", parent_agent=FakeParent(gate))
    second_parent = FakeParent()
    second = call(cfg, monkeypatch, goal="wait for the slot", parent_agent=second_parent)
    assert first["status"] == second["status"] == "dispatched"
    assert second["state"] == "queued" and "QUEUED" in second["note"] and "max_concurrent_children" in second["note"]
    did = second["delegation_id"]
    assert state(did) == "queued"
    assert did not in ad._records  # not on the engine: it holds no slot and cannot be judged stalled
    assert second_parent.built == []  # nothing built or run while queued
    gate.release.set()
    evt = wait_event(did)
    assert evt["status"] == "completed" and evt["results"][0]["summary"] == "done: wait for the slot"
    assert [c.goal for c in second_parent.built] == ["wait for the slot"]  # its own call's parent ran it
    assert state(did) == "completed"


def test_queued_calls_start_first_queued_first(monkeypatch):
    cfg = {"max_concurrent_children": 1}
    gate = Gate()
    call(cfg, monkeypatch, goal="hold the only slot", parent_agent=FakeParent(gate))
    handles = [call(cfg, monkeypatch, goal=f"queued number {i}", parent_agent=FakeParent(gate)) for i in range(3)]
    assert [h["state"] for h in handles] == ["queued"] * 3
    gate.release.set()
    for handle in handles:
        wait_event(handle["delegation_id"])
    assert gate.started == ["hold the only slot", "queued number 0", "queued number 1", "queued number 2"]


def test_a_fan_out_call_queues_every_unit_and_they_share_one_slot_when_started(monkeypatch):
    cfg = {"max_concurrent_children": 2, "independent_completions": True}
    gate = Gate()
    call(cfg, monkeypatch, goal="hold slot one", parent_agent=FakeParent(gate))
    call(cfg, monkeypatch, goal="hold slot two", parent_agent=FakeParent(gate))
    handle = call(cfg, monkeypatch, tasks=[{"goal": "first ungrouped"}, {"goal": "second ungrouped"}],
                  parent_agent=FakeParent(gate))
    ids = [u["delegation_id"] for u in handle["units"]]
    assert handle["state"] == "queued" and [state(i) for i in ids] == ["queued", "queued"]
    gate.release.set()
    assert sorted(wait_event(i)["results"][0]["summary"] for i in ids) == ["done: first ungrouped",
                                                                          "done: second ungrouped"]


def test_refuse_gives_the_agent_an_error_and_queues_nothing(monkeypatch):
    cfg = {"max_concurrent_children": 1, "at_capacity": "refuse"}
    gate = Gate()
    call(cfg, monkeypatch, goal="hold the only slot", parent_agent=FakeParent(gate))
    out = call(cfg, monkeypatch, goal="turned away")
    gate.release.set()
    assert out["status"] == "error"
    assert "capacity reached" in out["error"] and "delegation.at_capacity is `refuse`" in out["error"]
    assert ad.runtime().ledger().queued_rows() == []


@pytest.mark.parametrize("cfg,key", [
    ({"max_concurrent_children": 1, "max_queued_per_session": 1}, "delegation.max_queued_per_session=1"),
    ({"max_concurrent_children": 1, "max_queued": 1}, "delegation.max_queued=1"),
])
def test_past_a_queue_bound_a_call_is_refused_naming_the_key(monkeypatch, cfg, key):
    gate = Gate()
    call(cfg, monkeypatch, goal="hold the only slot", parent_agent=FakeParent(gate))
    assert call(cfg, monkeypatch, goal="first to wait")["state"] == "queued"
    out = call(cfg, monkeypatch, goal="one too many")
    gate.release.set()
    assert out["status"] == "error" and key in out["error"] and "offload config set" in out["error"]
    assert [r.task["goals"] for r in ad.runtime().ledger().queued_rows()] in ([["first to wait"]], [])


def test_another_sessions_queue_does_not_count_against_this_sessions_bound(monkeypatch):
    cfg = {"max_concurrent_children": 1, "max_queued_per_session": 1}
    gate = Gate()
    call(cfg, monkeypatch, goal="hold the only slot", parent_agent=FakeParent(gate))
    assert call(cfg, monkeypatch, goal="session one waits", parent_agent=FakeParent(session_id="one"))["state"] == "queued"
    assert call(cfg, monkeypatch, goal="session two waits", parent_agent=FakeParent(session_id="two"))["state"] == "queued"
    gate.release.set()


def test_a_queued_row_of_an_owner_that_died_is_started_here_rebuilt_from_the_row(monkeypatch):
    """A restart: the row was queued by a process that is gone; this one starts it."""
    cfg = {"max_concurrent_children": 2}
    monkeypatch.setattr(dt, "_load_config", lambda: cfg)
    spec = {"goals": ["left by a dead owner"], "tasks": [{"goal": "left by a dead owner"}], "context": None,
            "role": "leaf", "model": "m", "task_indexes": [0], "group": None, "max_iterations": 5, "is_batch": True,
            "run_on": "local", "routing": {"session_key": "sess-dead", "parent_session_id": "sess-dead",
                                           "origin_ui_session_id": "", "origin_session_id": "", "origin": {}}}
    dead_pid = 2 ** 22 + 17  # beyond pid_max on this machine: no such process
    row = DispatchRow("deleg_orphanqueued", "sess-dead", time.time(), spec, parent_session_id="sess-dead",
                      owner_pid=dead_pid, owner_started_at=1)
    off = ad.runtime()
    assert off.ledger().enqueue_unit(row, time.time(), held=True)
    rebuilt = FakeParent(session_id="this-process")
    monkeypatch.setattr(off, "_queue_parent", lambda: rebuilt)
    assert off.admission.pump() == 0  # nothing of this process waits: a finalize never reads the ledger for it
    assert off.admission.pump(foreign=True) == 1
    evt = wait_event("deleg_orphanqueued")
    assert evt["status"] == "completed" and evt["session_key"] == "sess-dead"
    assert [c.goal for c in rebuilt.built] == ["left by a dead owner"]
    owner = ad.get_durable_delegation("deleg_orphanqueued")
    assert owner["state"] == "completed"
    assert off.ledger().get("deleg_orphanqueued").owner_pid == current_owner()[0]


def test_a_queued_unit_carries_its_token_budget_to_the_process_that_adopts_it(monkeypatch):
    """The call's budget is in the queued row; an owner that starts the row after the call's
    process died caps the rebuilt children with it, under the dispatching session."""
    cfg = {"max_concurrent_children": 1, "max_tokens_per_delegation": 40}
    gate = Gate()
    call(cfg, monkeypatch, goal="hold the only slot", parent_agent=FakeParent(gate))
    queued = call(cfg, monkeypatch, goal="wait for the slot", parent_agent=FakeParent(session_id="sess-budget"))
    off = ad.runtime()
    spec = off.ledger().get(queued["delegation_id"]).task
    call_id = spec["budget"].pop("call_id")
    assert call_id.startswith("call_") and spec["budget"] == {
        "max_tokens": 40, "max_cost_usd": None, "cost_guard": None, "session_key": "sess-budget", "counted": True}
    spec["budget"]["call_id"] = call_id
    gate.release.set()
    wait_event(queued["delegation_id"])
    dead_pid = 2 ** 22 + 17  # beyond pid_max on this machine: no such process
    orphan = DispatchRow("deleg_budgetorphan", "sess-budget", time.time(), spec, parent_session_id="sess-budget",
                         owner_pid=dead_pid, owner_started_at=1)
    assert off.ledger().enqueue_unit(orphan, time.time(), held=True)
    rebuilt = FakeParent(session_id="this-process")
    monkeypatch.setattr(off, "_queue_parent", lambda: rebuilt)
    assert off.admission.pump(foreign=True) == 1
    assert wait_event("deleg_budgetorphan")["status"] == "completed"
    [child] = rebuilt.built
    assert (child.token_budget.cap, child.token_budget.session_key, child.token_budget.call_id) == (
        40, "sess-budget", call_id)
    assert child.token_budget.shared  # it stops on the call's total in the ledger, wherever its units run


def test_a_queued_row_of_a_live_owner_is_left_to_it(monkeypatch):
    monkeypatch.setattr(dt, "_load_config", lambda: {"max_concurrent_children": 2})
    row = DispatchRow("deleg_heldelsewhere", "s", time.time(), {"goals": ["g"], "tasks": [{"goal": "g"}]},
                      owner_pid=1, owner_started_at=None)  # pid 1 is alive
    off = ad.runtime()
    off.ledger().enqueue_unit(row, time.time(), held=True)
    assert off.admission.pump(foreign=True) == 0
    assert state("deleg_heldelsewhere") == "queued"


def test_a_row_this_process_cannot_rebuild_goes_back_to_the_queue_not_left_running(monkeypatch):
    monkeypatch.setattr(dt, "_load_config", lambda: {"max_concurrent_children": 2})
    row = DispatchRow("deleg_norebuild", "s", time.time(), {"goals": ["g"], "tasks": [{"goal": "g"}]},
                      owner_pid=2 ** 22 + 17, owner_started_at=1)
    off = ad.runtime()
    off.ledger().enqueue_unit(row, time.time(), held=True)

    def no_credentials():
        raise RuntimeError("no API key here")
    monkeypatch.setattr(off, "_queue_parent", no_credentials)
    assert off.admission.pump(foreign=True) == 0
    assert state("deleg_norebuild") == "queued" and "deleg_norebuild" not in ad._records
    monkeypatch.setattr(off, "_queue_parent", lambda: FakeParent())
    assert off.admission.pump(foreign=True) == 1  # taken over by this process, started once it can
    assert wait_event("deleg_norebuild")["status"] == "completed"


def test_a_stopped_queued_unit_never_starts_and_is_reported_interrupted_to_its_session(monkeypatch):
    cfg = {"max_concurrent_children": 1}
    gate = Gate()
    call(cfg, monkeypatch, goal="hold the only slot", parent_agent=FakeParent(gate))
    parent = FakeParent(gate)
    queued = call(cfg, monkeypatch, goal="never to run", parent_agent=parent)["delegation_id"]
    off = ad.runtime()
    assert off.admission.cancel(lambda row: row.parent_session_id == "parent-sid", "stopped by the user") == 1
    evt = wait_event(queued)
    assert evt["status"] == "interrupted" and evt["session_key"] == "parent-sid"
    assert "stopped before it started (stopped by the user)" in evt["results"][0]["error"]
    assert state(queued) == "interrupted" and off.ledger().queued_rows() == []
    assert off.admission.items() == []
    gate.release.set()
    assert parent.built == []  # it never ran, also not once the slot freed
    assert off.admission.cancel(lambda row: True, "again") == 0


def test_a_process_that_adopts_only_its_sessions_leaves_another_sessions_orphan_queued(monkeypatch):
    """offload run exits once its own results are in: it must not start (and then abandon) a dead
    owner's unit of another session."""
    monkeypatch.setattr(dt, "_load_config", lambda: {"max_concurrent_children": 2})
    row = DispatchRow("deleg_notmine", "sess-other", time.time(), {"goals": ["g"], "tasks": [{"goal": "g"}]},
                      parent_session_id="sess-other", owner_pid=2 ** 22 + 17, owner_started_at=1)
    off = ad.runtime()
    off.ledger().enqueue_unit(row, time.time(), held=True)
    monkeypatch.setattr(off.admission, "adopts", lambda r: r.parent_session_id == "sess-mine")
    monkeypatch.setattr(off, "_queue_parent", lambda: FakeParent())
    assert off.admission.pump(foreign=True) == 0 and state("deleg_notmine") == "queued"
    monkeypatch.setattr(off.admission, "adopts", lambda r: True)
    assert off.admission.pump(foreign=True) == 1
    assert wait_event("deleg_notmine")["status"] == "completed"
