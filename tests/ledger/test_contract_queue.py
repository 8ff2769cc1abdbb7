"""The ledger contract for the admission queue (``delegation.at_capacity: queue``): a unit
queued at capacity is a ``queued`` row, listed in order, taken by exactly one owner, put back
in its place when it cannot start, and never mistaken for a running or deliverable row.
Every backend of ``BACKENDS``; explicit ``now`` everywhere, no clock, no sleep."""
from __future__ import annotations

import threading

import pytest

from tests.ledger.test_contract import T0, dispatch_row, event_for, ledger, ledger_factory  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(60)
ME = (4242, 987654)


def test_queued_rows_are_listed_first_queued_first_and_are_neither_running_nor_pending(ledger):
    assert ledger.enqueue_unit(dispatch_row("b", dispatched_at=T0 + 2), T0 + 2, held=True)
    assert ledger.enqueue_unit(dispatch_row("a", dispatched_at=T0 + 1), T0 + 1, held=True)
    assert ledger.enqueue_unit(dispatch_row("c", dispatched_at=T0 + 2), T0 + 2, held=True)
    assert [r.delegation_id for r in ledger.queued_rows()] == ["a", "b", "c"]
    assert all(r.state == "queued" for r in ledger.queued_rows())
    assert ledger.running_rows() == []  # recovery never settles a queued unit as unknown
    assert ledger.pending_rows() == []  # nothing to deliver yet
    assert [r.delegation_id for r in ledger.undelivered_rows("sess-parent")] == ["a", "b", "c"]


def test_enqueue_never_overwrites_an_existing_id(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    assert ledger.enqueue_unit(dispatch_row("a", task={"goal": "other"}), T0 + 1, held=True) is False
    row = ledger.get("a")
    assert row.state == "running" and row.task["goal"] == "summarize the repo"


def test_a_held_row_keeps_its_owner_and_one_for_the_workers_has_none(ledger):
    ledger.enqueue_unit(dispatch_row("held"), T0, held=True)
    ledger.enqueue_unit(dispatch_row("workers"), T0)
    assert (ledger.get("held").owner_pid, ledger.get("held").owner_started_at) == ME
    assert ledger.get("workers").owner_pid is None


def test_a_claim_turns_the_row_running_under_the_new_owner_and_only_one_claim_wins(ledger):
    ledger.enqueue_unit(dispatch_row("a"), T0, held=True)
    taken = ledger.claim_queued("a", T0 + 5, (777, 555), 10)
    assert taken is not None and taken.state == "running" and (taken.owner_pid, taken.owner_started_at) == (777, 555)
    assert taken.task["goal"] == "summarize the repo"
    assert ledger.claim_queued("a", T0 + 6, (888, 1), 10) is None
    assert ledger.claim_queued("missing", T0 + 6, (888, 1), 10) is None
    assert ledger.queued_rows() == [] and [r.delegation_id for r in ledger.running_rows()] == ["a"]


def test_racing_owners_on_separate_instances_take_each_row_once(ledger_factory):
    first = ledger_factory()
    for i in range(6):
        first.enqueue_unit(dispatch_row(f"q{i}", dispatched_at=T0 + i), T0 + i, held=True)
    instances = [ledger_factory() for _ in range(3)]
    won: list[list[str]] = [[] for _ in instances]
    start = threading.Barrier(len(instances))

    def take(k: int) -> None:
        start.wait(timeout=10)
        for i in range(6):
            if instances[k].claim_queued(f"q{i}", T0 + 10, (1000 + k, 1), 100) is not None:
                won[k].append(f"q{i}")

    threads = [threading.Thread(target=take, args=(k,)) for k in range(len(instances))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(sum(won, [])) == [f"q{i}" for i in range(6)]  # each once, none twice


def test_requeue_puts_a_taken_row_back_in_its_place(ledger):
    ledger.enqueue_unit(dispatch_row("a", dispatched_at=T0), T0, held=True)
    ledger.enqueue_unit(dispatch_row("b", dispatched_at=T0 + 1), T0 + 1, held=True)
    ledger.claim_queued("a", T0 + 5, (777, 555), 10)
    ledger.requeue_unit(dispatch_row("a", dispatched_at=T0), T0 + 6)
    assert [r.delegation_id for r in ledger.queued_rows()] == ["a", "b"]


def test_requeue_writes_a_vanished_row_again_and_leaves_a_finished_one_alone(ledger):
    row = dispatch_row("a")
    ledger.enqueue_unit(row, T0, held=True)
    ledger.claim_queued("a", T0 + 1, ME, 10)
    ledger.forget("a")  # a refused dispatch forgets the row it was about to write
    ledger.requeue_unit(row, T0 + 2)
    assert [r.delegation_id for r in ledger.queued_rows()] == ["a"]
    ledger.claim_queued("a", T0 + 3, ME, 10)
    ledger.persist_completion(row, event_for(row), {"summary": "x"}, T0 + 4)
    ledger.requeue_unit(row, T0 + 5)
    assert ledger.get("a").state == "completed" and ledger.queued_rows() == []
