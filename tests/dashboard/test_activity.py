"""Live activity of units another process runs: its owner publishes a snapshot to the ledger
(``offload.owner.activity``), and the dashboard roster and ``offload agents`` show it, with its age.
Plus the publisher's rules (only changes, one write; withdrawn when the unit ends)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from offload.ledger import open_ledger
from offload.owner import activity
from offload.dashboard import model
from tests.e2e.conftest import until

pytestmark = pytest.mark.timeout(90)
WAIT_S = 30.0


class OtherOwner:
    """``activity_owner.py`` in its own process, on this test's ``$HERMES_HOME``."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("activity_owner.py"))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": os.getcwd()})
        ready = self.proc.stdout.readline().split()
        if ready[:1] != ["READY"]:
            self.proc.kill()
            pytest.fail(f"the other owner did not start: {ready}")
        self.delegation_id = ready[1]

    def say(self, line: str, answer: str | None = None) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        if answer:
            assert self.proc.stdout.readline().strip() == answer

    def finish(self) -> int:
        self.say("finish")
        return self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def other_owner():
    owners: list[OtherOwner] = []

    def start() -> OtherOwner:
        owners.append(OtherOwner())
        return owners[-1]
    yield start
    for owner in owners:
        owner.kill()


def _roster_unit(off, delegation_id: str):
    return next((u for u in model.roster(off) if u["id"] == delegation_id), None)


def _children_show(off, delegation_id: str, first_tool: str):
    unit = _roster_unit(off, delegation_id)
    if unit and unit["children"] and unit["children"][0]["current_tool"] == first_tool:
        return unit
    return None


def test_the_roster_shows_activity_of_a_unit_another_process_runs(runtime, other_owner):
    owner = other_owner()
    unit = until(lambda: _children_show(runtime, owner.delegation_id, "web_search"),
                 "the other process's activity showed")
    assert not unit["local"] and unit["activity_age_s"] is not None and unit["activity_age_s"] < WAIT_S
    assert [(c["api_calls"], c["current_tool"]) for c in unit["children"]] == [(2, "web_search"), (7, None)]
    assert unit["stall_clock_s"] is not None and unit["children"][1]["idle_s"] >= 0

    owner.say("next", "NEXT")
    unit = until(lambda: _children_show(runtime, owner.delegation_id, "terminal"), "the changed activity showed")
    assert unit["children"][0]["api_calls"] == 5

    listed = subprocess.run([sys.executable, "-m", "offload", "agents", "--json"], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    [row] = [r for r in json.loads(listed.stdout)["running"] if r["id"] == owner.delegation_id]
    assert [(c["api_calls"], c["current_tool"]) for c in row["children"]] == [(5, "terminal"), (7, None)]
    assert row["activity_age_s"] is not None and row["stall_clock_s"] is not None
    text = subprocess.run([sys.executable, "-m", "offload", "agents"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
    assert "api calls 5 tool terminal" in text and "activity as of" in text

    assert owner.finish() == 0
    unit = _roster_unit(runtime, owner.delegation_id)  # a snapshot left by an exited owner is never shown as live
    assert unit["status"] == "completed" and unit["activity_age_s"] is None
    assert [c["current_tool"] for c in unit["children"]] == [None, None]


def _item(did: str, tool: str | None, api_calls: int, idle_s: float, status: str = "running") -> dict:
    return {"delegation_id": did, "status": status, "seconds_since_progress": idle_s, "in_tool": tool is not None,
            "children_activity": [{"api_calls": api_calls, "current_tool": tool, "seconds_since_activity": idle_s}]}


def test_the_publisher_writes_only_changes_in_one_batch_and_withdraws_what_ended(tmp_path):
    ledger = open_ledger(f"memory://{tmp_path}")
    ledger.request_control("x", "interrupt", 0, 1)  # the store exists
    publisher = activity.Publisher()
    publisher.publish(ledger, [_item("a", "web", 1, 2.0), _item("b", None, 0, 1.0)], 1000.0)
    assert publisher.writes == 1 and set(ledger.read_activity(["a", "b"])) == {"a", "b"}
    # A quiet unit a second later: its "seconds since" grew, its absolute times did not -> no write.
    publisher.publish(ledger, [_item("a", "web", 1, 3.0), _item("b", None, 0, 2.0)], 1001.0)
    assert publisher.writes == 1
    publisher.publish(ledger, [_item("a", "terminal", 2, 0.0), _item("b", None, 0, 3.0, "finalizing")], 1002.0)
    assert publisher.writes == 2 and ledger.read_activity(["a"])["a"][0] == 1002.0
    publisher.publish(ledger, [_item("b", None, 0, 4.0, "completed")], 1003.0)
    assert publisher.writes == 3 and ledger.read_activity(["a", "b"]) == {}


def test_a_snapshot_reads_back_as_the_live_rosters_fields_with_its_age():
    snap = activity.snapshot(_item("a", "web", 3, 5.0), now=1000.0)
    view = activity.live_view(snap, written_at=1000.0, now=1004.0)
    assert view["snapshot_age_s"] == 4.0 and view["seconds_since_progress"] == 9.0
    assert view["children_activity"] == [{"api_calls": 3, "current_tool": "web", "seconds_since_activity": 9.0}]
    assert activity.remote_views(object(), ["a"]) == {}  # a ledger that cannot say: nothing, no error


def test_a_unit_younger_than_one_interval_is_not_published(tmp_path):
    ledger = open_ledger(f"memory://{tmp_path}")
    ledger.request_control("x", "interrupt", 0, 1)  # the store exists
    publisher = activity.Publisher()
    young = {**_item("a", "web", 1, 0.0), "dispatched_at": 1000.0 - activity.INTERVAL_S / 2}
    publisher.publish(ledger, [young], 1000.0)
    assert publisher.writes == 0 and ledger.read_activity(["a"]) == {}
    publisher.publish(ledger, [young], 1000.0 + activity.INTERVAL_S)
    assert publisher.writes == 1 and set(ledger.read_activity(["a"])) == {"a"}
