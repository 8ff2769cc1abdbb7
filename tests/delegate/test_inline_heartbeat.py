"""An inline (synchronous) delegation keeps its parent alive (issue 29 item 4): while the
children make progress, the parent's activity clock moves too, so a parent waiting on them is
never judged idle or stalled."""
from __future__ import annotations

import json
import threading

import pytest

import tools.delegate_tool as dt
from tests.delegate.fakes import FakeParent
from tests.engine.conftest import clean_engine  # noqa: F401 - fixture

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


class WatchedParent(FakeParent):
    def __init__(self, behaviour) -> None:
        super().__init__(behaviour)
        self.touches = 0
        self.alive = threading.Event()

    def touch_activity(self) -> None:
        self.touches += 1
        if self.touches >= 3:
            self.alive.set()


def test_inline_children_that_make_progress_touch_the_parents_activity():
    parent = WatchedParent(lambda child: ({"final_response": "done", "completed": True}
                                         if parent.alive.wait(10) else {"final_response": None}))
    out = json.loads(dt.delegate_task(goal="work inline for a while", background=False, parent_agent=parent))
    assert out["mode"] == "sync" and out["results"][0]["status"] == "completed"  # it saw the parent touched
    assert parent.touches >= 3


def test_a_real_agent_parent_counts_a_touch_as_activity(tmp_path):
    from offload.agent.core import AIAgent

    clock = [100.0]
    agent = AIAgent(model="m", base_url=None, api_key=None, toolsets=[], workspace=tmp_path, clock=lambda: clock[0])
    clock[0] = 250.0
    agent.touch_activity()
    assert agent.get_activity_summary()["last_activity_ts"] == 250.0
