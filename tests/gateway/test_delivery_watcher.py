"""The delivery watcher with a fake bus, fake chats and the claim protocol faked in the
runtime's ``Deliveries`` it is given: what is claimed, when, for which chat, and what a retry does."""
from __future__ import annotations

import queue

import pytest

from offload.gateway.platform import Route
from offload.gateway.watcher import DeliveryWatcher

DM_KEY = "agent:main:telegram:dm:7"
TOPIC_KEY = "agent:main:telegram:thread:-100:55"


class FakeBus:
    def __init__(self) -> None:
        self.completion_queue: queue.Queue = queue.Queue()

    def drain_notifications(self, session_key="", owns_event=None):
        taken, others = [], []
        while not self.completion_queue.empty():
            evt = self.completion_queue.get_nowait()
            (taken if owns_event(evt) else others).append(evt)
        for evt in others:
            self.completion_queue.put(evt)
        return [(evt, f"text of {evt['delegation_id']}") for evt in taken]


class FakeChat:
    def __init__(self, route: Route, chat_type: str) -> None:
        self.route, self.chat_type, self.idle, self.batches = route, chat_type, True, []

    def submit_results(self, batch) -> None:
        self.batches.append(batch)


class Claims:
    """The ledger's claim protocol, as the runtime's ``Deliveries`` offers it: ids in
    ``held_elsewhere`` are refused."""

    def __init__(self) -> None:
        self.held_elsewhere: set[str] = set()
        self.claimed: list[str] = []
        self.released: list[str] = []
        self.release_state = "pending"
        self.drops: list[tuple[str, str]] = []  # released out of attempts: (id, why the last attempt failed)
        self.dropped: list[tuple[str, str | None, str | None]] = []  # dropped: (id, claim, reason)

    def claim_event(self, evt, consumer):
        if evt["delegation_id"] in self.held_elsewhere:
            return None
        self.claimed.append(evt["delegation_id"])
        return f"{consumer}:{evt['delegation_id']}"

    def release_event(self, evt, claim, why=""):
        self.released.append(evt["delegation_id"])
        if self.release_state == "dropped":
            self.drops.append((evt["delegation_id"], why))
        return self.release_state

    def drop(self, delegation_id, claim=None, reason=None):
        self.dropped.append((delegation_id, claim, reason))
        return True

    def get(self, delegation_id):
        return None  # nothing shown by an earlier attempt


@pytest.fixture
def claims() -> Claims:
    return Claims()


@pytest.fixture
def bus() -> FakeBus:
    return FakeBus()


@pytest.fixture
def chats() -> dict[str, FakeChat]:
    return {}


@pytest.fixture
def watcher(bus, chats, claims) -> DeliveryWatcher:
    def chat_for(key, route, chat_type):
        return chats.setdefault(key, FakeChat(route, chat_type))
    return DeliveryWatcher("telegram", bus, claims, chat_for, consumer="gw", backoff_s=2.0, max_backoff_s=5.0)


def result(did: str, key: str = DM_KEY) -> dict:
    return {"type": "async_delegation", "delegation_id": did, "session_key": key}


def test_results_landing_together_for_one_chat_become_one_batch(bus, watcher, chats, claims):
    for evt in (result("d1"), result("d2"), result("t1", TOPIC_KEY)):
        bus.completion_queue.put(evt)
    assert watcher.tick(now=0) == 3
    assert [[c.delegation_id for c in b] for b in chats[DM_KEY].batches] == [["d1", "d2"]]
    assert [[c.delegation_id for c in b] for b in chats[TOPIC_KEY].batches] == [["t1"]]
    assert chats[TOPIC_KEY].route == Route("-100", "55") and chats[TOPIC_KEY].chat_type == "thread"
    assert chats[DM_KEY].batches[0][0].claim == "gw:d1"


def test_other_platforms_and_the_cli_keep_their_events(bus, watcher, chats):
    cli_event = {"type": "async_delegation", "delegation_id": "c1", "session_key": "sess_abc"}
    slack_event = result("s1", "agent:main:slack:dm:9")
    bus.completion_queue.put(cli_event)
    bus.completion_queue.put(slack_event)
    assert watcher.tick(now=0) == 0
    assert chats == {} and bus.completion_queue.qsize() == 2


def test_a_busy_chat_is_not_claimed_for_until_it_is_idle(bus, watcher, chats, claims):
    bus.completion_queue.put(result("d1"))
    watcher.tick(now=0)
    chats[DM_KEY].batches.clear()
    chats[DM_KEY].idle = False
    bus.completion_queue.put(result("d2"))
    assert watcher.tick(now=1) == 0
    assert claims.claimed == ["d1"] and watcher.pending_count() == 1  # buffered, no attempt spent
    chats[DM_KEY].idle = True
    assert watcher.tick(now=2) == 1 and claims.claimed == ["d1", "d2"]


def test_a_result_another_consumer_holds_is_left_to_it(bus, watcher, chats, claims):
    claims.held_elsewhere.add("d1")
    bus.completion_queue.put(result("d1"))
    bus.completion_queue.put(result("d2"))
    assert watcher.tick(now=0) == 1
    assert [[c.delegation_id for c in b] for b in chats[DM_KEY].batches] == [["d2"]]
    assert watcher.pending_count() == 0


def test_a_batch_given_back_is_released_and_retried_with_growing_backoff(bus, watcher, chats, claims):
    bus.completion_queue.put(result("d1"))
    watcher.tick(now=0)
    [batch] = chats[DM_KEY].batches
    watcher.batch_done(DM_KEY, batch, "retry", now=10)
    assert claims.released == ["d1"] and watcher.pending_count() == 1
    assert watcher.tick(now=11.9) == 0  # backoff 2 s
    assert watcher.tick(now=12) == 1
    watcher.batch_done(DM_KEY, chats[DM_KEY].batches[-1], "retry", now=20)
    assert watcher.tick(now=23.9) == 0  # then 4 s
    assert watcher.tick(now=24) == 1
    watcher.batch_done(DM_KEY, chats[DM_KEY].batches[-1], "retry", now=30)
    assert watcher.tick(now=34.9) == 0  # then capped at 5 s
    assert watcher.tick(now=35) == 1
    watcher.batch_done(DM_KEY, chats[DM_KEY].batches[-1], "done", now=40)
    assert claims.released == ["d1"] * 3 and watcher._pending[DM_KEY].failures == 0


def test_a_result_out_of_attempts_is_dropped_with_a_reason_not_rebuffered(bus, watcher, chats, claims):
    bus.completion_queue.put(result("d1"))
    watcher.tick(now=0)
    claims.release_state = "dropped"
    watcher.batch_done(DM_KEY, chats[DM_KEY].batches[0], "retry")
    assert watcher.pending_count() == 0
    assert claims.drops == [("d1", "the chat could not be reached")]  # the ledger words the rest


def test_a_result_for_a_chat_no_longer_allowed_is_dropped_with_the_reason(bus, chats, claims):
    watcher = DeliveryWatcher("telegram", bus, claims, lambda *a: pytest.fail("no chat may be opened"), consumer="gw",
                              allowed=lambda chat_id: chat_id == "-100")
    bus.completion_queue.put(result("d1"))
    assert watcher.tick(now=0) == 0
    assert claims.dropped == [("d1", "gw:d1", "chat 7 is not in gateway.telegram.allowed_chat_ids")] and chats == {}
