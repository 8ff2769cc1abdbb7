"""The CLI consumer: ownership, claims, dedupe against stored turns, and the inject protocol."""
from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from offload.cli.views import Ui
from offload.context.approval import get_current_session_key
from offload.context.session_env import async_delivery_supported
from offload.session.conversation import Conversation, _new_messages, delegate_handles
from offload.session.driver import SessionDriver
from offload.session.inbox import RETRY_FIRST_S, SessionInbox
from tests.engine.conftest import drain_queue
from tests.runtime_support import dispatch, finished

pytestmark = [pytest.mark.timeout(30)]


@pytest.fixture
def store(runtime):
    with runtime.session_store() as s:
        yield s


def test_poll_takes_only_this_sessions_results_and_claims_them(runtime, store):
    mine, other = finished(runtime, "s1"), finished(runtime, "s2")
    [item] = SessionInbox("s1", store, runtime).poll()
    assert item.event["delegation_id"] == mine["delegation_id"] and item.claim.startswith("cli:")
    assert "[ASYNC DELEGATION COMPLETE" in item.text
    assert [e["delegation_id"] for e in drain_queue(runtime.bus)] == [other["delegation_id"]]  # left for its owner


def test_a_result_claimed_elsewhere_is_left_to_that_consumer(runtime, store):
    evt = finished(runtime, "s1")
    assert runtime.deliveries.claim(evt["delegation_id"], "gateway:1:x")
    assert SessionInbox("s1", store, runtime).poll() == []
    assert runtime.deliveries.get(evt["delegation_id"])["delivery_state"] == "pending"


def test_a_result_a_stored_turn_already_carries_is_only_acknowledged(runtime, store):
    evt = finished(runtime, "s1")
    store.append_turn("s1", [{"role": "user", "content": "[the result]"}], [evt["delegation_id"]])
    assert SessionInbox("s1", store, runtime).poll() == []  # crash came between "turn stored" and "claim completed"
    assert runtime.deliveries.get(evt["delegation_id"])["delivery_state"] == "delivered"


def test_acknowledge_and_give_back(runtime, store):
    evt = finished(runtime, "s1")
    inbox = SessionInbox("s1", store, runtime)
    [item] = inbox.poll()
    inbox.give_back(item)
    row = runtime.deliveries.get(evt["delegation_id"])
    assert (row["delivery_state"], row["delivery_attempts"]) == ("pending", 1)
    [again] = inbox.poll()  # requeued, and claimable again at once
    inbox.acknowledge(again)
    assert runtime.deliveries.get(evt["delegation_id"])["delivery_state"] == "delivered"


def test_restored_results_of_this_session_are_owned(runtime, store):
    evt = dict(finished(runtime, "s1"), restored=True)
    drain_queue(runtime.bus)
    runtime.bus.completion_queue.put(evt)
    assert [i.delegation_id for i in SessionInbox("s1", store, runtime).poll()] == [evt["delegation_id"]]


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


def test_a_failed_injection_gives_the_result_back_and_holds_it_for_a_backoff(runtime, store):
    evt = finished(runtime, "s1")
    now = [100.0]
    inbox = SessionInbox("s1", store, runtime, clock=lambda: now[0])
    driver = SessionDriver(runtime, Conversation(FakeAgent("s1", fail=True), store), inbox, Ui())
    assert driver.deliver_ready() == 1
    assert not store.was_injected("s1", evt["delegation_id"])
    row = runtime.deliveries.get(evt["delegation_id"])
    assert row["delivery_state"] == "pending" and row["delivery_attempts"] == 1  # not an outage: an attempt spent
    driver.conversation = Conversation(FakeAgent("s1"), store)
    assert driver.deliver_ready() == 0  # held back: never retried in a tight loop
    now[0] += RETRY_FIRST_S
    assert driver.deliver_ready() == 1
    assert store.was_injected("s1", evt["delegation_id"])
    assert runtime.deliveries.get(evt["delegation_id"])["delivery_state"] == "delivered"


def test_wait_for_background_returns_once_the_sessions_results_are_in(runtime, store):
    release = threading.Event()
    dispatch(runtime, lambda: release.wait(10) and {"status": "completed", "summary": "late"}, session_key="s1",
             parent_session_id="s1")
    agent = FakeAgent("s1")
    driver = SessionDriver(runtime, Conversation(agent, store), SessionInbox("s1", store, runtime), Ui())
    assert driver.live_count() == 1
    assert driver.wait_for_background(on_wait=release.set) is True  # released once it is really waiting
    assert driver.live_count() == 0 and "late" in agent.seen[-1][0]


def test_a_first_ctrl_c_while_waiting_cuts_no_call_short_and_stops_the_sessions_work(runtime, store):
    """The Ctrl-C lands in the middle of a call of the wait loop (as it may in a ledger read): the
    call finishes, and the wait then stops the session's subagents, whose partial result is in."""
    release = threading.Event()
    dispatch(runtime, lambda: (release.wait(90), {"status": "interrupted", "summary": None})[1],
             session_key="s1", parent_session_id="s1", interrupt_fn=release.set)
    calls_finished = []

    def on_wait() -> None:
        if not calls_finished:
            os.kill(os.getpid(), signal.SIGINT)
            calls_finished.append("after the Ctrl-C")  # not reached when the Ctrl-C raises in here

    driver = SessionDriver(runtime, Conversation(FakeAgent("s1"), store), SessionInbox("s1", store, runtime), Ui())
    assert driver.wait_for_background(on_wait=on_wait) is True
    assert calls_finished == ["after the Ctrl-C"] and release.is_set()
    assert driver.live_count() == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back after the wait


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
