"""#14 item 6: a child is built on the worker that runs it, never on the caller's thread."""
from __future__ import annotations

import json
import threading

import pytest

import tools.delegate_tool as dt
from tests.delegate.fakes import FakeChild, FakeParent
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from tools import async_delegation as ad

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


class GatedParent(FakeParent):
    """build_child blocks until ``release`` is set; records the building thread; may raise."""

    def __init__(self, *, fail_goals=(), **kw):
        super().__init__(**kw)
        self.release = threading.Event()
        self.building = threading.Event()
        self.build_threads: list[threading.Thread] = []
        self.fail_goals = set(fail_goals)

    def build_child(self, *, task_index, goal, **kw) -> FakeChild:
        self.build_threads.append(threading.current_thread())
        self.building.set()
        assert self.release.wait(10), "the test never released the build"
        if goal in self.fail_goals:
            raise ConnectionError("provider handshake failed")
        return super().build_child(task_index=task_index, goal=goal, **kw)


def delegate(parent, **kw) -> dict:
    return json.loads(dt.delegate_task(parent_agent=parent, **kw))


def test_a_slow_build_never_blocks_the_parent():
    parent = GatedParent()
    handle = delegate(parent, goal="summarise the changelog")  # returns while the build is still blocked
    assert handle["status"] == "dispatched" and parent.built == []
    assert parent.building.wait(5)
    assert parent.build_threads[0] is not threading.current_thread()
    parent.release.set()
    evt = wait_event(handle["delegation_id"])
    assert evt["results"][0]["status"] == "completed" and evt["results"][0]["summary"] == "done: summarise the changelog"


def test_a_failing_build_is_an_error_entry_and_its_siblings_still_run():
    parent = GatedParent(fail_goals={"build me badly"})
    parent.release.set()
    handle = delegate(parent, tasks=[{"goal": "build me badly"}, {"goal": "build me well"}])
    evt = wait_event(handle["delegation_id"])
    bad, good = evt["results"]
    assert (bad["status"], bad["error"]) == ("error", "ConnectionError: provider handshake failed")
    assert bad["failure_reason"] == "building the subagent raised"
    assert good["status"] == "completed" and [c.goal for c in parent.built] == ["build me well"]


def test_a_failing_build_in_sync_mode_is_reported_not_raised():
    parent = GatedParent(fail_goals={"build me badly"})
    parent.release.set()
    out = delegate(parent, goal="build me badly", background=False)
    assert out["mode"] == "sync" and out["results"][0]["status"] == "error"
    assert all(t is not threading.current_thread() for t in parent.build_threads)


def test_an_interrupt_during_the_build_is_honoured():
    parent = GatedParent()
    handle = delegate(parent, goal="summarise the changelog")
    assert parent.building.wait(5)
    assert ad.interrupt_for_session(parent_session_id=parent.session_id) == 1  # stop while the build runs
    parent.release.set()
    evt = wait_event(handle["delegation_id"])
    (entry,) = evt["results"]
    assert entry["status"] == "interrupted" and "before the subagent started" in entry["error"]
    (child,) = parent.built
    assert child.prompts == [] and child.stop.is_set()  # built, interrupted, never run


def test_a_parent_interrupt_during_a_sync_build_is_honoured(monkeypatch):
    from offload.subagents import children as kids

    stopped = threading.Event()
    real_stop = kids.stop
    monkeypatch.setattr(kids, "stop", lambda unit: (real_stop(unit), stopped.set()))
    parent = GatedParent()
    box = {}
    caller = threading.Thread(target=lambda: box.update(out=delegate(parent, tasks=[
        {"goal": "first slow build"}, {"goal": "second slow build"}], background=False)))
    caller.start()
    assert parent.building.wait(5)
    parent._interrupt_requested = True
    assert stopped.wait(5)  # the collector saw the interrupt while both builds were blocked
    parent.release.set()
    caller.join(10)
    assert not caller.is_alive()
    assert [r["status"] for r in box["out"]["results"]] == ["interrupted", "interrupted"]
    assert all(c.prompts == [] for c in parent.built) and parent._active_children == []
