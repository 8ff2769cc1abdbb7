"""#14 item 7 (unit level): context compression with session lineage; results reach the live tip."""
from __future__ import annotations

import json

import pytest

from offload.agent import compression
from offload.agent.core import AIAgent
from offload.agent.llm import AssistantTurn
from offload.cli.views import Ui
from offload.session.conversation import Conversation
from offload.session.driver import SessionDriver
from offload.session.inbox import SessionInbox
from tests.engine.conftest import drain_queue
from tests.runtime_support import dispatch
from tests.runtime_support import finished as finished_on

pytestmark = [pytest.mark.timeout(30)]


def turn(user: str, *, tool: bool = False) -> list[dict]:
    if not tool:
        return [{"role": "user", "content": user}, {"role": "assistant", "content": f"re: {user}"}]
    call = {"id": "c1", "type": "function", "function": {"name": "delegate_task", "arguments": "{}"}}
    return [{"role": "user", "content": user}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "{}"}, {"role": "assistant", "content": "started"}]


HISTORY = [{"role": "system", "content": "sys"}, *turn("one", tool=True), *turn("two"), *turn("three", tool=True)]


@pytest.fixture
def store(runtime):
    with runtime.session_store() as s:
        yield s


# -- the pure parts ---------------------------------------------------------------------------

def test_split_keeps_the_latest_turns_whole_and_never_separates_tool_results():
    system, old, keep = compression.split_for_compression(HISTORY)
    assert system == HISTORY[:1] and old == HISTORY[1:7] and keep == HISTORY[7:]
    assert keep[0] == {"role": "user", "content": "three"} and keep[-1]["content"] == "started"
    assert [m["role"] for m in keep] == ["user", "assistant", "tool", "assistant"]


def test_compressed_history_is_summary_then_the_kept_turns():
    out = compression.compressed_history(HISTORY, "the user counted to one")
    assert out[0] == HISTORY[0] and out[1]["content"].startswith(compression.SUMMARY_HEADER)
    assert "the user counted to one" in out[1]["content"] and out[3:] == HISTORY[7:]


@pytest.mark.parametrize("window,expected", [(None, False), (10_000, False), (100, True)])
def test_compression_starts_near_the_window(window, expected):
    assert compression.needs_compression(HISTORY, "next", window, 0.8) is expected


def test_too_little_history_is_never_compressed_however_full():
    assert not compression.needs_compression(HISTORY[:5], "x" * 10_000, 256, 0.8)


# -- lineage in the store -----------------------------------------------------------------------

def test_lineage_resolves_to_the_live_tip(store):
    a = store.create_session()
    b = store.continue_session(a, [{"role": "user", "content": "summary"}])
    c = store.continue_session(b, [])
    assert [store.live_tip(s) for s in (a, b, c)] == [c, c, c]
    assert store.load_messages(b) == [{"role": "user", "content": "summary"}]
    assert store.live_tip("sess_unknown") is None


def test_a_lineage_whose_successor_is_missing_does_not_resolve(store):
    a = store.create_session()
    with store._transaction() as conn:  # as a partial copy or a hand-edited file would leave it
        conn.execute("INSERT INTO session_lineage VALUES ('sess_gone', ?, 'compression', 0)", (a,))
    assert store.live_tip(a) is None


# -- the conversation compresses, and results reach the tip --------------------------------------

class Model:
    """Summarises when asked to, answers anything else; records what it saw."""

    def __init__(self):
        self.requests = []

    def stream_turn(self, messages, tools, *, on_activity=None, should_stop=None, on_text=None):
        self.requests.append(messages)
        if messages[0]["content"] == compression.SUMMARIZER_PROMPT:
            return AssistantTurn("SUMMARY: counted one to three", [], "stop", None)
        return AssistantTurn("fine", [], "stop", None)


def test_a_full_context_moves_the_conversation_to_a_successor_session(store, tmp_path):
    old = store.create_session()
    store.append_turn(old, HISTORY)
    model = Model()
    agent = AIAgent(model="m", base_url=None, api_key=None, toolsets=[], workspace=tmp_path, session_id=old, llm=model)
    conversation = Conversation(agent, store, context_window_tokens=300)
    result = conversation.run_turn("and now four " * 40)
    new = conversation.session_id
    assert result.compressed_from == old and new != old and agent.session_id == new
    assert store.live_tip(old) == new
    assert store.load_messages(old) == HISTORY  # the old session is kept as it was
    sent = model.requests[-1]
    assert sent[1]["content"].startswith(compression.SUMMARY_HEADER) and "counted one to three" in sent[1]["content"]
    assert store.load_messages(new)[-1] == {"role": "assistant", "content": "fine"}


def test_a_failed_summary_runs_the_turn_uncompressed(store, tmp_path):
    class Broken(Model):
        def stream_turn(self, messages, tools, **kw):
            if messages[0]["content"] == compression.SUMMARIZER_PROMPT:
                raise ConnectionError("down")
            return super().stream_turn(messages, tools, **kw)

    old = store.create_session()
    store.append_turn(old, HISTORY)
    agent = AIAgent(model="m", base_url=None, api_key=None, toolsets=[], workspace=tmp_path, session_id=old, llm=Broken())
    conversation = Conversation(agent, store, context_window_tokens=300)
    assert conversation.run_turn("four " * 100).compressed_from is None and conversation.session_id == old


def test_a_result_dispatched_before_compression_is_owned_only_by_the_live_tip(runtime, store):
    a = store.create_session()
    b = store.continue_session(a, [])
    c = store.continue_session(b, [])
    evt = finished_on(runtime, a, "7")
    drain_queue(runtime.bus)
    assert SessionInbox(c, store, runtime).owns(evt)
    assert not SessionInbox(b, store, runtime).owns(evt)  # compressed away: not the live session
    assert not SessionInbox(store.create_session(), store, runtime).owns(evt)


def test_an_unresolvable_lineage_leaves_the_result_pending_and_retryable(runtime, store):
    a = store.create_session()
    with store._transaction() as conn:
        conn.execute("INSERT INTO session_lineage VALUES ('sess_gone', ?, 'compression', 0)", (a,))
    other = store.create_session()
    evt = finished_on(runtime, a, "7")
    assert SessionInbox(other, store, runtime).poll() == []
    row = runtime.deliveries.get(evt["delegation_id"])
    assert (row["delivery_state"], row["delivery_attempts"]) == ("pending", 0)  # not even claimed
    assert [e["delegation_id"] for e in drain_queue(runtime.bus)] == [evt["delegation_id"]]  # still on the bus


class Answering:
    def __init__(self, session_id):
        self.session_id, self.model, self.base_url = session_id, "fake", "http://127.0.0.1:9/v1"
        self.seen = []

    def run_conversation(self, text, history):
        self.seen.append(text)
        return {"final_response": "ok", "exit_reason": "completed",
                "messages": [*(history or []), {"role": "user", "content": text}]}

    def interrupt(self, message=None):
        pass


def test_new_racing_a_delivery_never_delivers_into_the_new_session(runtime, store):
    old = store.create_session()
    fresh = store.create_session()
    driver = SessionDriver(runtime, Conversation(Answering(old), store), SessionInbox(old, store, runtime), Ui(),
                           new_conversation=lambda: Conversation(Answering(fresh), store))
    evt = finished_on(runtime, old, "7")
    [item] = driver.inbox.poll()  # claimed for the old session...
    driver.new_session()  # ...and /new lands before it is injected
    driver.inject(item)
    assert driver.conversation.agent.seen == [] and not store.was_injected(fresh, evt["delegation_id"])
    row = runtime.deliveries.get(evt["delegation_id"])
    assert row["delivery_state"] == "pending"  # and its claim released: the resume below can claim it
    assert SessionInbox(fresh, store, runtime).poll() == []  # the new session never takes it
    resumed = SessionDriver(runtime, Conversation(Answering(old), store), SessionInbox(old, store, runtime), Ui())
    assert resumed.deliver_ready() == 1 and store.was_injected(old, evt["delegation_id"])


def test_stop_after_compression_reaches_work_dispatched_before_it(runtime, store):
    import threading

    a = store.create_session()
    b = store.continue_session(a, [])
    assert store.lineage(b) == [b, a] and store.lineage(a) == [a]
    stopped = threading.Event()
    dispatch(runtime, lambda: stopped.wait(10) and {"status": "interrupted", "summary": None}, "find the number",
             session_key=a, parent_session_id=a, interrupt_fn=stopped.set)
    driver = SessionDriver(runtime, Conversation(Answering(b), store), SessionInbox(b, store, runtime), Ui())
    assert driver.live_count() == 1  # the pre-compression unit is this session's work
    assert driver.stop_background() == 1 and stopped.is_set()


def test_a_result_stored_before_compression_is_only_acknowledged_at_the_tip(runtime, store):
    a = store.create_session()
    evt = finished_on(runtime, a, "7")
    store.append_turn(a, [{"role": "user", "content": "[the result]"}], [evt["delegation_id"]])
    b = store.continue_session(a, [])  # then compressed; the claim's completion was lost in a crash
    assert SessionInbox(b, store, runtime).poll() == []
    assert runtime.deliveries.get(evt["delegation_id"])["delivery_state"] == "delivered"


def test_resuming_a_compressed_session_by_id_or_prefix_continues_at_its_tip(store):
    from offload.session.conversation import _resolve_session

    a = store.create_session()
    b = store.continue_session(a, [])
    assert _resolve_session(store, a) == b and _resolve_session(store, a[:12]) == b
    assert _resolve_session(store, b) == b


def test_the_inbox_owns_by_the_events_origin_or_the_flat_fields_of_an_older_event(runtime, store):
    a = store.create_session()
    b = store.continue_session(a, [])
    c = store.continue_session(b, [])
    carried = {"type": "async_delegation", "delegation_id": "d1",
               "origin": {"session_key": "k", "parent_session_id": a}}
    old = {"type": "async_delegation", "delegation_id": "d2", "session_key": "k", "parent_session_id": a,
           "origin_ui_session_id": "", "origin_session_id": ""}  # as the previous version wrote it
    for evt in (carried, old):
        assert SessionInbox(c, store, runtime).owns(evt)  # the live tip of its parent session
        assert not SessionInbox(b, store, runtime).owns(evt)  # compressed away: not the live session
    woken = {"type": "async_delegation", "delegation_id": "d3", "origin": {"wake_session_id": c}}
    assert SessionInbox(c, store, runtime).owns(woken)
    assert not SessionInbox(c, store, runtime).owns({"type": "async_delegation", "origin": {"session_key": "other"}})
