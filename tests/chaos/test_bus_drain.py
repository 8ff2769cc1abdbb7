"""The completion bus under 100 concurrent consumers: every event reaches its owner exactly once.

The workload is ``bench.cases.bus.drain_race`` (its timing, target < 2 s, is reported by
``python -m bench.cases.bus``, not asserted here); this test checks only who got what.
"""
from __future__ import annotations

import queue
from collections import Counter

import pytest

from bench.cases.bus import PUBLIC_EVERY, drain_race
from offload.engine.bus_queue import IndexedQueue

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]


def test_100_consumers_and_2000_events_each_event_reaches_its_owner_exactly_once():
    run = drain_race(n_consumers=100, n_events=2000, deadline_s=100)
    got = run["got"]
    taken = Counter(eid for ids in got.values() for eid in ids)
    assert run["left"] == 0 and sorted(taken) == sorted({*taken}) and set(taken.values()) == {1}
    assert len(taken) == 2000
    for key, ids in got.items():
        owned = [eid for eid in ids if eid.startswith("d")]
        assert all(int(eid[1:]) % 100 == int(key[1:]) for eid in owned), (key, owned[:5])
        assert len(owned) == len([i for i in range(2000) if i % 100 == int(key[1:]) and i % PUBLIC_EVERY != 99])


def test_the_indexed_queue_is_still_a_fifo_queue_for_direct_users():
    q = IndexedQueue()
    assert isinstance(q, queue.Queue) and q.empty()
    events = [{"type": "async_delegation", "delegation_id": f"d{i}", "session_key": f"s{i % 3}"} for i in range(9)]
    for evt in events:
        q.put(evt)
    assert [e["delegation_id"] for e in q.take([("session_key", "s1")], lambda e: True)] == ["d1", "d4", "d7"]
    assert q.qsize() == 6
    assert [q.get_nowait()["delegation_id"] for _ in range(6)] == ["d0", "d2", "d3", "d5", "d6", "d8"]
    with pytest.raises(queue.Empty):
        q.get_nowait()
    assert q._by_key == {}  # nothing left indexed once everything is gone


def test_an_event_two_consumers_accept_goes_to_exactly_one():
    q = IndexedQueue()
    q.put({"type": "completion", "id": "p"})
    inner: list = []

    def accept_slowly(evt):
        # Another consumer drains while this predicate runs: predicates run outside the queue's
        # mutex (a nested take would deadlock otherwise), and the event is removed only once.
        inner.extend(q.take_all(lambda e: True))
        return True

    assert q.take_all(accept_slowly) == []
    assert [e["id"] for e in inner] == ["p"] and q.empty()
