"""The ``Origin`` a gateway chat turn captures travels whole: tool call → unit spec → ledger row
→ event → the gateway watcher of the NEXT process (replayed from the ledger after a restart),
which routes by it. A row written by the previous version (flat fields only) still routes."""
from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from offload.engine import engine as engine_module
from offload.engine.units import UnitSpec
from offload.gateway.platform import Route
from offload.gateway.session_context import clear_session_vars, set_session_vars
from offload.gateway.watcher import DeliveryWatcher
from offload.ledger import DispatchRow
from offload.origin import Origin
from offload.runtime import Offload
from offload.subagents.dispatch import capture_origin
from tests.engine.conftest import wait_event
from tests.gateway.test_delivery_watcher import FakeChat

pytestmark = pytest.mark.timeout(60)
TOPIC_KEY = "agent:main:telegram:thread:-100:55"


def _watch(off: Offload) -> tuple[DeliveryWatcher, dict[str, FakeChat]]:
    chats: dict[str, FakeChat] = {}
    watcher = DeliveryWatcher("telegram", off.bus, off.deliveries,
                              chat_for=lambda key, route, chat_type: chats.setdefault(key, FakeChat(route, chat_type)))
    return watcher, chats


def _captured_in_a_chat_turn() -> Origin:
    set_session_vars(platform="telegram", source="gateway", chat_id="-100", chat_type="thread", thread_id="55",
                     user_id="u-7", user_name="Ana", scope_id="team-1", session_key=TOPIC_KEY, session_id="sess-1")
    try:
        return capture_origin(SimpleNamespace(session_id="sess-1"))
    finally:
        clear_session_vars()


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped: the "previous process"."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_chat_turns_origin_arrives_whole_at_the_gateway_of_the_next_process(_isolated_hermes_home, dead_pid,
                                                                              monkeypatch):
    origin = _captured_in_a_chat_turn()
    assert origin == Origin(session_key=TOPIC_KEY, parent_session_id="sess-1", platform="telegram",
                            chat_type="thread", chat_id="-100", thread_id="55", scope_id="team-1", user_id="u-7",
                            user_name="Ana")
    # The first process's units are owned by a pid that is gone by the time the second one starts.
    monkeypatch.setattr(engine_module, "current_owner", lambda: (dead_pid, None))
    with Offload(home=_isolated_hermes_home) as first:
        handle = first.engine.dispatch(UnitSpec("count the files", role="leaf", model="m", origin=origin),
                                       lambda: {"status": "completed", "summary": "3 files"}, 1)
        wait_event(handle["delegation_id"], bus=first.bus)  # taken, never delivered: the process "dies"
        assert first.ledger().get(handle["delegation_id"]).origin == origin
    monkeypatch.undo()

    with Offload(home=_isolated_hermes_home) as second:
        watcher, chats = _watch(second)
        assert watcher.tick() == 1
        [[claimed]] = chats[TOPIC_KEY].batches
    assert claimed.event["restored"] is True and claimed.delegation_id == handle["delegation_id"]
    assert Origin.of_event(claimed.event) == origin  # whole: identity, chat and thread
    assert claimed.event["origin"] == origin.to_json()
    assert (chats[TOPIC_KEY].route, chats[TOPIC_KEY].chat_type) == (Route("-100", "55"), "thread")
    # the flat fields a previous version reads are still written beside it
    assert (claimed.event["session_key"], claimed.event["parent_session_id"], claimed.event["user_id"]) == (
        TOPIC_KEY, "sess-1", "u-7")


def test_a_row_the_previous_version_wrote_is_replayed_and_routed_by_its_flat_fields(_isolated_hermes_home):
    now = time.time()
    task = {"goal": "old goal", "context": None, "toolsets": None, "role": "leaf", "model": "m", "is_batch": False,
            "user_id": "u-9"}
    row = DispatchRow("deleg_old", TOPIC_KEY, now - 5, task, "", "", "sess-old")  # no origin: the old form
    event = {"type": "async_delegation", "delegation_id": "deleg_old", "status": "completed",
             "session_key": TOPIC_KEY, "origin_ui_session_id": "", "origin_session_id": "",
             "parent_session_id": "sess-old", "user_id": "u-9", "goal": "old goal", "summary": "done long ago",
             "dispatched_at": now - 5, "completed_at": now - 1}
    with Offload(home=_isolated_hermes_home) as off:
        off.ledger().persist_dispatch(row, now - 5)
        off.ledger().persist_completion(row, event, {"status": "completed", "summary": "done long ago"}, now - 1)
        assert off.ledger().get("deleg_old").origin == Origin.capture(TOPIC_KEY, "sess-old", user_id="u-9")
        watcher, chats = _watch(off)
        assert watcher.tick() == 1
    [[claimed]] = chats[TOPIC_KEY].batches
    assert "origin" not in claimed.event  # replayed as stored
    assert Origin.of_event(claimed.event).chat() == {"platform": "telegram", "chat_type": "thread",
                                                     "chat_id": "-100", "thread_id": "55"}
    assert chats[TOPIC_KEY].route == Route("-100", "55")
