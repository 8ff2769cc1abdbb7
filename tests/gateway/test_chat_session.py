"""``ChatSession`` in process, with a recording platform and the scripted model server: inline
fallback on a channel that cannot deliver later, exactly-once after a crash, and drops."""
from __future__ import annotations

import threading

import pytest
import yaml

from offload.agent.session_store import new_session_id
from offload.config import load_config
from offload.session.conversation import Conversation
from offload.gateway.chat_session import ChatSession, Claimed
from offload.gateway.platform import ChatGone, Incoming, Route
from offload.runtime import Offload
from offload.testing.model_server import text_reply
from tests.e2e.gateway_harness import chat_parent, echo_goal

pytestmark = pytest.mark.timeout(60)
KEY = "agent:main:webhook:dm:1"


class RecordingPlatform:
    name = "webhook"

    def __init__(self, delivers_later: bool = True, gone: bool = False) -> None:
        self.delivers_later, self.gone = delivers_later, gone
        self.sent: list[tuple[str, str]] = []  # (header, body)
        self.changed = threading.Condition()

    def send(self, route: Route, body: str, header: str = "", first_part: int = 0, on_part=None) -> list[str]:
        if self.gone:
            raise ChatGone("403 Forbidden: bot was blocked by the user")
        with self.changed:
            self.sent.append((header, body))
            self.changed.notify_all()
        return [str(len(self.sent))]

    def wait_for(self, needle: str, timeout_s: float = 30) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: any(needle in h or needle in b for h, b in self.sent), timeout_s), \
                self.sent


class RecordingDeliveries:
    """Stands in for the runtime's ``Deliveries``: records how each claim was settled."""

    def __init__(self) -> None:
        self.settled: list[tuple[str, str | None]] = []  # (how, claim or delegation id)
        self.reasons: dict[str, str | None] = {}  # delegation id -> why it was dropped

    def complete_event(self, evt: dict, claim: str | None) -> bool:
        self.settled.append(("done", claim))
        return True

    def mark_delivered(self, delegation_id: str) -> bool:
        self.settled.append(("acknowledged", delegation_id))
        return True

    def drop(self, delegation_id: str, claim: str | None = None, reason: str | None = None) -> bool:
        self.settled.append(("drop", f"{delegation_id}/{claim}"))
        self.reasons[delegation_id] = reason
        return True

    def record_progress(self, delegation_id: str, claim: str, parts: int) -> bool:
        return True


@pytest.fixture
def chat_factory(_isolated_hermes_home, model_server):
    server = model_server(chat_parent(lambda text: {"goal": "inline job"}, echo_goal,
                                      after_tool=text_reply("Here is what the subagent found.")))
    config = {"model": "demo-model", "base_url": server.url, "toolsets": ["delegation"]}
    (_isolated_hermes_home / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    off = Offload(load_config())
    store = off.session_store()
    done: list[tuple[list, str]] = []
    settled = threading.Event()

    def on_batch_done(batch: list, outcome: str) -> None:
        done.append((batch, outcome))
        settled.set()

    def conversation_for(session_id: str) -> Conversation:
        return Conversation(off.build_agent(session_id), store, session_key=KEY)

    def make(platform: RecordingPlatform, on_new_session: str = "deliver") -> ChatSession:
        return ChatSession(KEY, Route("1"), "dm", platform,
                           lambda key, fresh: conversation_for(store.create_session(new_session_id())),
                           on_batch_done, on_new_session)
    make.server, make.done, make.settled, make.conversation_for = server, done, settled, conversation_for
    make.runtime = off
    yield make
    off.close()


def test_a_channel_that_cannot_deliver_later_runs_delegate_task_inline_and_says_why(chat_factory):
    platform = RecordingPlatform(delivers_later=False)
    chat = chat_factory(platform)
    chat.submit_user(Incoming(Route("1"), "dm", "do it"))
    platform.wait_for("Here is what the subagent found.")
    [(header, note)] = [(h, b) for h, b in platform.sent if h == "Subagents ran inline"]
    assert "Background delivery is not available" in note
    assert chat_factory.runtime.engine.list() == []  # nothing was dispatched to the background
    tool_results = [m["content"] for r in chat_factory.server.requests for m in r["messages"] if m["role"] == "tool"]
    assert any('"mode": "sync"' in t and "result of inline job" in t for t in tool_results)


def test_a_result_a_stored_turn_already_carries_is_only_acknowledged(chat_factory):
    deliveries = RecordingDeliveries()
    platform = RecordingPlatform()
    chat = chat_factory(platform)
    session_id = chat.conversation.session_id
    chat.conversation.store.append_turn(session_id, [{"role": "user", "content": "[ASYNC DELEGATION…"}], ["deleg_1"])
    evt = {"type": "async_delegation", "delegation_id": "deleg_1", "parent_session_id": session_id}
    chat.submit_results([Claimed(evt, "the result", "claim-1", deliveries)])
    assert chat_factory.settled.wait(30)
    assert deliveries.settled == [("done", "claim-1")] and platform.sent == []  # not shown, not injected again
    assert chat_factory.done[0][1] == "done"


def test_a_chat_that_is_gone_drops_the_batch_with_the_reason(chat_factory):
    deliveries = RecordingDeliveries()
    chat = chat_factory(RecordingPlatform(gone=True))
    evt = {"type": "async_delegation", "delegation_id": "deleg_2", "parent_session_id": chat.conversation.session_id}
    chat.submit_results([Claimed(evt, "the result", "claim-2", deliveries)])
    assert chat_factory.settled.wait(30)
    assert deliveries.settled == [("drop", "deleg_2/claim-2")]
    assert deliveries.reasons["deleg_2"] == "chat 1 cannot be reached: 403 Forbidden: bot was blocked by the user"
    assert chat_factory.server.requests == []  # no turn ran for it



def test_an_interim_notice_is_shown_but_never_stands_in_for_the_units_result(chat_factory):
    deliveries = RecordingDeliveries()
    platform = RecordingPlatform()
    chat = chat_factory(platform)
    sid = chat.conversation.session_id
    notice = {"type": "async_delegation", "task_failure_notice": True, "delegation_id": "deleg_4",
              "parent_session_id": sid, "status": "running"}
    chat.submit_results([Claimed(notice, "[ASYNC DELEGATION TASK FAILED — deleg_4, task 1/2]", "", deliveries)])
    assert chat_factory.settled.wait(30)
    platform.wait_for("TASK FAILED")
    assert not chat.conversation.store.was_injected(sid, "deleg_4")  # the result is still to come
    Claimed(notice, "", "", deliveries).drop("the chat is gone")
    assert deliveries.settled == []  # a notice has no row of its own: nothing settled, nothing dropped
    chat_factory.settled.clear()
    final = {"type": "async_delegation", "delegation_id": "deleg_4", "parent_session_id": sid, "status": "completed"}
    chat.submit_results([Claimed(final, "[ASYNC DELEGATION BATCH COMPLETE — deleg_4]", "claim-4", deliveries)])
    assert chat_factory.settled.wait(30)
    platform.wait_for("BATCH COMPLETE")
    assert deliveries.settled == [("done", "claim-4")] and chat.conversation.store.was_injected(sid, "deleg_4")


def test_after_compression_a_result_of_the_earlier_id_is_this_sessions_own(chat_factory):
    deliveries = RecordingDeliveries()
    platform = RecordingPlatform()
    chat = chat_factory(platform, on_new_session="drop")
    before = chat.conversation.session_id
    chat.conversation = chat_factory.conversation_for(chat.conversation.store.continue_session(before, []))
    own = {"type": "async_delegation", "delegation_id": "deleg_own", "parent_session_id": before}
    other = {"type": "async_delegation", "delegation_id": "deleg_old", "parent_session_id": "sess_left_with_new"}
    chat.submit_results([Claimed(own, "[ASYNC DELEGATION own result", "c1", deliveries),
                         Claimed(other, "[ASYNC DELEGATION old", "c2", deliveries)])
    platform.wait_for("Result noted.")
    # /new's drop policy applies to the session it left, not to compression
    assert [what for how, what in deliveries.settled if how == "drop"] == ["deleg_old/c2"]
    # no status: never "finished"
    assert ("Background result deleg_own (unknown)", "[ASYNC DELEGATION own result") in platform.sent
