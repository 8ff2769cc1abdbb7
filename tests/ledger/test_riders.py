"""Completions waiting to ride the next dispatch's round trip (``postgres.riders``, issue 31):
one is queued only while the process is dispatching, a carrier takes what is queued and answers
each, and one that no carrier takes withdraws and sends itself."""
from __future__ import annotations

import threading
import time

import pytest

import offload.ledger.postgres.riders as postgres_riders
from offload.ledger.postgres.riders import RETRY, Riders

pytestmark = pytest.mark.timeout(30)


def riding(riders: Riders, params: tuple) -> tuple[threading.Thread, list]:
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(riders.ride(params)), daemon=True)
    thread.start()
    return thread, outcome


def queued(riders: Riders, count: int = 1) -> None:
    deadline = time.monotonic() + 10
    while len(riders._queue) < count:  # no event to wait on: the rider's thread appends, then waits
        assert time.monotonic() < deadline, "the completion never queued"
        time.sleep(0.001)


def test_without_a_recent_dispatch_a_completion_sends_itself_at_once():
    riders = Riders()
    assert riders.ride(("a",)) is RETRY
    assert riders.take() == []  # nothing was queued


def test_a_dispatch_carries_what_is_queued_and_answers_each(monkeypatch):
    monkeypatch.setattr(postgres_riders, "WAIT_S", 30.0)  # only a carrier ends the wait
    monkeypatch.setattr(postgres_riders, "WINDOW_S", 30.0)  # a thread started late under load still rides
    riders = Riders()
    riders.take()  # a dispatch: the process is dispatching
    (first, got_first), (second, got_second) = riding(riders, ("a",)), riding(riders, ("b",))
    queued(riders, 2)
    taken = riders.take()
    assert sorted(rider.params for rider in taken) == [("a",), ("b",)]
    for rider in taken:
        rider.answer(1 if rider.params == ("a",) else -1)
    first.join(10)
    second.join(10)
    assert (got_first, got_second) == ([1], [-1])
    assert riders.take() == []


def test_a_completion_no_dispatch_comes_for_withdraws_and_sends_itself(monkeypatch):
    monkeypatch.setattr(postgres_riders, "WAIT_S", 0.01)
    riders = Riders()
    riders.take()
    assert riders.ride(("a",)) is RETRY
    assert riders.take() == []  # withdrawn: no later dispatch carries it too


def test_no_dispatch_within_the_window_means_no_waiting(monkeypatch):
    monkeypatch.setattr(postgres_riders, "WINDOW_S", 0.0)
    monkeypatch.setattr(postgres_riders, "WAIT_S", 30.0)  # would hang the test if it waited
    riders = Riders()
    riders.take()
    assert riders.ride(("a",)) is RETRY
