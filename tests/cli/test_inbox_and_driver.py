"""The CLI consumer: ownership, claims, dedupe against stored turns, and the inject protocol."""
from __future__ import annotations

import json
import threading

import pytest

from offload.agent.session_store import SessionStore
from offload.driver import SessionDriver
from offload.inbox import SessionInbox
from offload.runtime import Conversation, _new_messages, delegate_handles
from offload.cli.views import Ui
from tests.engine.conftest import clean_engine, drain_queue, wait_event  # noqa: F401 - fixture
from tools import async_delegation as ad
from tools.approval_context import get_current_session_key
from tools.process_registry import process_registry
from offload.context.session_env import async_delivery_supported

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


def finished(session_id: str, summary: str = "ok") -> dict:
    """Dispatch a unit for ``session_id`` and wait until its event is on the bus (left there)."""
    handle = ad.dispatch_async_delegation(
        goal="g", context=None, toolsets=None, role="leaf", model="m", session_key=session_id,
        parent_session_id=session_id, runner=lambda: {"status": "completed", "summary": summary})
    evt = wait_event(handle["delegation_id"])
    process_registry.completion_queue.put(evt)
    return evt


@pytest.fixture
def store():
    with SessionStore() as s:
        yield s


def test_poll_takes_only_this_sessions_results_and_claims_them(store):
    mine, other = finished("s1"), finished("s2")
    [item] = SessionInbox("s1", store).poll()
    assert item.event["delegation_id"] == mine["delegation_id"] and item.claim.startswith("cli:")
    assert "[ASYNC DELEGATION COMPLETE" in item.text
    assert [e["delegation_id"] for e in drain_queue()] == [other["delegation_id"]]  # left for its owner


def test_a_result_claimed_elsewhere_is_left_to_that_consumer(store):
    evt = finished("s1")
    assert ad.claim_completion_delivery(evt["delegation_id"], "gateway:1:x")
    assert SessionInbox("s1", store).poll() == []
    assert ad.get_durable_delegation(evt["delegation_id"])["delivery_state"] == "pending"


def test_a_result_a_stored_turn_already_carries_is_only_acknowledged(store):
    evt = finished("s1")
    store.append_turn("s1", [{"role": "user", "content": "[the result]"}], [evt["delegation_id"]])
    assert SessionInbox("s1", store).poll() == []  # crash came between "turn stored" and "claim completed"
    assert ad.get_durable_delegation(evt["delegation_id"])["delivery_state"] == "delivered"


def test_acknowledge_and_give_back(store):
    evt = finished("s1")
    inbox = SessionInbox("s1", store)
    [item] = inbox.poll()
    inbox.give_back(item)
    row = ad.get_durable_delegation(evt["delegation_id"])
    assert (row["delivery_state"], row["delivery_attempts"]) == ("pending", 1)
    [again] = inbox.poll()  # requeued, and claimable again at once
    inbox.acknowledge(again)
    assert ad.get_durable_delegation(evt["delegation_id"])["delivery_state"] == "delivered"


def test_restored_results_of_this_session_are_owned():
    evt = dict(finished("s1"), restored=True)
    drain_queue()
    process_registry.completion_queue.put(evt)
    with SessionStore() as store:
        assert [i.delegation_id for i in SessionInbox("s1", store).poll()] == [evt["delegation_id"]]


class FakeAgent:
    """Answers every turn with one line; records what the turn saw."""

    def __init__(self, session_id: str, fail: bool = False) -> None:
        self.session_id, self.fail = session_id, fail
        self.model, self.base_url = "fake", "http://127.0.0.1:9/v1"
        self.seen: list[tuple[str, str, bool]] = []

    def run_conversation(self, text, history):
        self.seen.append((text, get_current_session_key(default=""), async_delivery_supported()))
        if self.fail:
            raise RuntimeError("model exploded")
        messages = [*(history or [{"role": "system", "content": "sys"}]), {"role": "user", "content": text},
                    {"role": "assistant", "content": f"re: {text}"}]
        return {"final_response": f"re: {text}", "exit_reason": "completed", "messages": messages}

    def interrupt(self, message=None):
        pass


def test_a_turn_runs_bound_to_the_session_and_is_stored_whole(store):
    agent = FakeAgent("s1")
    conversation = Conversation(agent, store)
    assert conversation.run_turn("hi").answer == "re: hi"
    conversation.run_turn("[result]", injected_ids=["deleg_1"])
    assert agent.seen == [("hi", "s1", True), ("[result]", "s1", True)]
    assert [m["content"] for m in store.load_messages("s1")] == ["sys", "hi", "re: hi", "[result]", "re: [result]"]
    assert store.was_injected("s1", "deleg_1")
    sync = Conversation(FakeAgent("s1"), store, sync_delegation=True)
    assert sync.history == conversation.history  # resumed from the store
    sync.run_turn("again")
    assert sync.agent.seen == [("again", "s1", False)]  # delegate_task will run its children in the turn


def test_a_failed_injection_gives_the_result_back(store):
    evt = finished("s1")
    inbox = SessionInbox("s1", store)
    driver = SessionDriver(Conversation(FakeAgent("s1", fail=True), store), inbox, Ui())
    assert driver.deliver_ready() == 1
    assert not store.was_injected("s1", evt["delegation_id"])
    assert ad.get_durable_delegation(evt["delegation_id"])["delivery_state"] == "pending"
    driver.conversation = Conversation(FakeAgent("s1"), store)
    assert driver.deliver_ready() == 1  # requeued: the next poll delivers it
    assert store.was_injected("s1", evt["delegation_id"])
    assert ad.get_durable_delegation(evt["delegation_id"])["delivery_state"] == "delivered"


def test_wait_for_background_returns_once_the_sessions_results_are_in(store):
    release = threading.Event()
    ad.dispatch_async_delegation(goal="g", context=None, toolsets=None, role="leaf", model="m", session_key="s1",
                                 parent_session_id="s1",
                                 runner=lambda: release.wait(10) and {"status": "completed", "summary": "late"})
    agent = FakeAgent("s1")
    driver = SessionDriver(Conversation(agent, store), SessionInbox("s1", store), Ui())
    assert driver.live_count() == 1
    assert driver.wait_for_background(on_wait=release.set) is True  # released once it is really waiting
    assert driver.live_count() == 0 and "late" in agent.seen[-1][0]


def test_new_messages_and_delegate_handles():
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    turn = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "delegate_task", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "run_command", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"status": "dispatched", "delegation_id": "d"})},
            {"role": "tool", "tool_call_id": "c2", "content": "exit code: 0"}]
    assert _new_messages(history, history + turn) == turn
    assert _new_messages([], [{"role": "system", "content": "s"}, *turn]) == [{"role": "system", "content": "s"}, *turn]
    assert delegate_handles(turn) == [{"status": "dispatched", "delegation_id": "d"}]
