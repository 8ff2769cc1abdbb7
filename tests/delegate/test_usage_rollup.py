"""#14 item 4: subagent tokens and cost roll up into the parent's totals."""
from __future__ import annotations

import json
import threading

import pytest

import tools.delegate_tool as dt
from offload.agent.core import AIAgent
from offload.agent.llm import AssistantTurn
from tests.delegate.fakes import FakeParent
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from offload.subagents.usage import event_usage, roll_up_event, sum_usage

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


def spending(prompt: int, completion: int, cost: float | None = None):
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cost is not None:
        usage["cost_usd"] = cost
    return lambda child: {"final_response": f"done: {child.goal}", "completed": True, "api_calls": 1, "usage": usage}


class TotalsParent(FakeParent):
    def __init__(self, behaviour=None):
        super().__init__(behaviour)
        self.added: list[dict] = []

    def add_usage(self, usage):
        self.added.append(usage)


def test_each_result_entry_reports_its_childs_tokens_and_cost():
    out = json.loads(dt.delegate_task(goal="count the files", background=False,
                                      parent_agent=FakeParent(spending(120, 30, 0.002))))
    (entry,) = out["results"]
    assert entry["tokens"] == {"input": 120, "output": 30} and entry["cost_usd"] == 0.002


def test_inline_children_are_added_to_the_parents_totals_once():
    parent = TotalsParent(spending(100, 10, 0.01))
    out = json.loads(dt.delegate_task(tasks=[{"goal": "count the files"}, {"goal": "list the dirs"}],
                                      background=False, parent_agent=parent))
    assert out["usage"] == {"input_tokens": 200, "output_tokens": 20, "cost_usd": 0.02}
    assert parent.added == [out["usage"]]


def test_a_child_without_a_reported_cost_leaves_cost_unknown_not_zero():
    assert sum_usage([{"tokens": {"input": 5, "output": 1}, "cost_usd": None}]) == {
        "input_tokens": 5, "output_tokens": 1, "cost_usd": None}


def test_background_usage_is_in_the_result_and_added_only_on_delivery():
    gate = threading.Event()
    behaviour = spending(40, 4, 0.5)
    parent = TotalsParent(lambda c: (gate.wait(10), behaviour(c))[1])
    handle = json.loads(dt.delegate_task(goal="count the files", parent_agent=parent))
    assert handle["status"] == "dispatched" and "usage" not in handle
    gate.set()
    evt = wait_event(handle["delegation_id"])
    assert evt["results"][0]["tokens"] == {"input": 40, "output": 4}
    assert parent.added == []  # finished is not delivered: nothing counted yet
    roll_up_event(parent, evt)
    assert parent.added == [{"input_tokens": 40, "output_tokens": 4, "cost_usd": 0.5}]


@pytest.mark.parametrize("evt", [{}, {"results": "junk"}, {"results": [None, {"tokens": "x", "cost_usd": True}]}])
def test_malformed_events_add_nothing(evt):
    assert event_usage(evt) == {"input_tokens": 0, "output_tokens": 0, "cost_usd": None}


def test_the_agent_totals_its_own_runs_and_what_its_subagents_add(tmp_path):
    class OneAnswer:
        def stream_turn(self, messages, tools, *, on_activity=None, should_stop=None, on_text=None):
            return AssistantTurn("ok", [], "stop", {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.25})

    agent = AIAgent(model="m", base_url=None, api_key=None, toolsets=[], workspace=tmp_path, llm=OneAnswer())
    result = agent.run_conversation("hi")
    assert result["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.25}
    agent.add_usage({"input_tokens": 100, "output_tokens": 7, "cost_usd": None})
    assert agent.usage_totals == {"input_tokens": 110, "output_tokens": 9, "cost_usd": 0.25}


def test_the_driver_adds_background_usage_when_it_delivers_the_result(tmp_path):
    from offload.agent.session_store import SessionStore
    from offload.session.driver import SessionDriver
    from offload.session.inbox import SessionInbox
    from offload.session.conversation import Conversation
    from offload.cli.views import Ui
    from tools.async_delegation import runtime
    from tools.process_registry import process_registry

    class Answering(TotalsParent):
        session_id = "sess-usage"

        def run_conversation(self, text, history):
            return {"final_response": "noted", "exit_reason": "completed",
                    "messages": [*(history or []), {"role": "user", "content": text}]}

    agent = Answering(spending(40, 4, 0.5))
    agent.session_id = "sess-usage"
    handle = json.loads(dt.delegate_task(goal="count the files", parent_agent=agent))
    process_registry.completion_queue.put(wait_event(handle["delegation_id"]))
    with SessionStore() as store:
        driver = SessionDriver(runtime(), Conversation(agent, store), SessionInbox("sess-usage", store, runtime()), Ui())
        assert agent.added == []
        assert driver.deliver_ready() == 1
    assert agent.added == [{"input_tokens": 40, "output_tokens": 4, "cost_usd": 0.5}]


def test_the_run_summary_line_reports_totals_and_says_when_cost_is_unknown(tmp_path):
    from types import SimpleNamespace

    from offload.session.driver import SessionDriver
    from offload.cli.views import Ui

    agent = SimpleNamespace(usage_totals={"input_tokens": 1200, "output_tokens": 30, "cost_usd": None})
    driver = SessionDriver(None, SimpleNamespace(agent=agent), inbox=None, ui=Ui())
    assert driver.usage_line() == ("tokens used by this run: 1,200 in / 30 out, subagents included "
                                   "(cost not reported by the provider)")
    agent.usage_totals.update(cost_usd=0.5)
    assert driver.usage_line().endswith("(cost $0.5000)")
    agent.usage_totals.update(input_tokens=0, output_tokens=0)
    assert driver.usage_line() is None
