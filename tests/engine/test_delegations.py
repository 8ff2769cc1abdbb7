"""``Delegations`` on its own, as an embedding app would use it: given a ledger, a bus and a
policy, with no tools/ module involved (the facade tests cover the hermes names)."""
from __future__ import annotations

import os
import queue
import re
import threading

import pytest

from offload.engine.engine import Delegations, new_delegation_id
from offload.ledger import open_ledger
from offload.engine.policy import Policy
from offload.engine.units import UnitSpec
from offload.origin import Origin

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def engine():
    ledger = open_ledger("memory://")
    bus: queue.Queue = queue.Queue()
    engine = Delegations(ledger=lambda: ledger, publish=bus.put, policy=lambda: Policy(max_retained_completed=1))
    engine.bus, engine.store = bus, ledger
    yield engine
    engine.reset()


def test_a_unit_is_recorded_run_published_and_settled_in_the_given_ledger(engine):
    handle = engine.dispatch(UnitSpec("sum it", origin=Origin.capture("s1")),
                             lambda: {"status": "completed", "summary": "42"}, 2)

    evt = engine.bus.get(timeout=10)

    assert handle["status"] == "dispatched" and evt["delegation_id"] == handle["delegation_id"]
    assert (evt["status"], evt["summary"], evt["session_key"]) == ("completed", "42", "s1")
    row = engine.store.get(handle["delegation_id"])
    assert (row.state, row.event["summary"], row.delivery_state) == ("completed", "42", "pending")
    assert engine.active_count() == 0


def test_capacity_is_counted_in_slots_and_a_finished_unit_frees_its_slot(engine):
    release = threading.Event()
    first = engine.dispatch(UnitSpec("blocks"), lambda: release.wait(10) and {"status": "completed"}, 1)

    refused = engine.dispatch(UnitSpec("second"), lambda: {"status": "completed"}, 1)

    assert first["status"] == "dispatched"
    assert refused["status"] == "rejected" and "capacity reached (1 running)" in refused["error"]
    release.set()
    assert engine.bus.get(timeout=10)["delegation_id"] == first["delegation_id"]
    assert engine.dispatch(UnitSpec("third"), lambda: {"status": "completed"}, 1)["status"] == "dispatched"


class _Inline:
    """A pool that runs each job in ``submit``: dispatch returns after the unit is finalized."""

    def submit(self, job):
        job()


def test_the_policy_is_read_per_use(engine):
    engine.pool_for = lambda max_workers: _Inline()
    retained = {"n": 2}
    engine.policy = lambda: Policy(max_retained_completed=retained["n"])
    for goal in ("a", "b", "c"):
        engine.dispatch(UnitSpec(goal), lambda: {"status": "completed"}, 3)
    assert [r["goal"] for r in engine.list()] == ["b", "c"]

    retained["n"] = 1
    engine.dispatch(UnitSpec("d"), lambda: {"status": "completed"}, 3)

    assert [r["goal"] for r in engine.list()] == ["d"]


def test_ids_are_48_random_bits_and_a_forked_child_does_not_repeat_its_parent():
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write_end, new_delegation_id().encode())
        os._exit(0)
    os.close(write_end)
    mine = new_delegation_id()
    with os.fdopen(read_end) as pipe:
        theirs = pipe.read()
    os.waitpid(pid, 0)
    assert re.fullmatch(r"deleg_[0-9a-f]{12}", mine) and re.fullmatch(r"deleg_[0-9a-f]{12}", theirs)
    assert mine != theirs


def test_retention_drops_the_longest_retired_records_and_never_a_live_one(engine):
    engine.pool_for = lambda max_workers: _Inline()
    engine.policy = lambda: Policy(max_retained_completed=2)
    with engine.lock:  # older than every other record, and still running
        engine.records["deleg_live"] = {"delegation_id": "deleg_live", "goal": "live", "status": "running",
                                        "dispatched_at": 0.0, "completed_at": None}
    for goal in ("a", "b", "c", "d"):
        engine.dispatch(UnitSpec(goal), lambda: {"status": "completed"}, 9)
    with engine.lock:
        kept = [r["goal"] for r in engine.records.values()]
    assert kept == ["live", "c", "d"]


def test_an_engine_job_that_fails_past_its_runner_is_logged_not_lost(engine, caplog):
    # The pool runs engine jobs with no Future to hold an exception: it must reach the log.
    failed = threading.Event()

    def broken_finalize(*_args):
        failed.set()
        raise RuntimeError("finalize broke")

    engine.finalize = broken_finalize
    assert engine.dispatch(UnitSpec("a"), lambda: {"status": "completed"}, 2)["status"] == "dispatched"
    assert failed.wait(10)
    engine.executor.shutdown(wait=True)  # the worker has logged once it drained and exited
    assert any(r.exc_info and "finalize broke" in str(r.exc_info[1]) for r in caplog.records)
