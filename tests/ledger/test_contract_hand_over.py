"""The ledger contract for handing a running unit over between two live owners
(``offload.ledger.owner_epoch``): the leaving owner's one write puts the unit back in the queue
for anyone, and from then on every write it makes for that unit -- a step, a finished child, the
terminal write -- is refused, while the taker's land. Every backend of ``BACKENDS``; explicit
``now`` everywhere, no clock, no sleep."""
from __future__ import annotations

from dataclasses import replace

import pytest

from offload.ledger import LedgerError
from tests.ledger.test_contract import T0, dispatch_row, event_for, ledger, ledger_factory  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(60)
OLD, NEW = (4242, 987654), (5151, 123)
REPLY = {"message": {"role": "assistant", "content": None, "tool_calls": []}}


def _hand_over(old, new) -> object:
    row = dispatch_row("a")
    old.persist_dispatch(row, T0)
    assert old.append_step("a", 0, 0, "reply", REPLY, OLD, T0 + 1)
    assert old.hand_over(old.get("a"), {"goal": "resume me", "durable": {"resumes": 1}}, T0 + 2)
    return row


def test_a_handed_over_unit_is_queued_for_anyone_with_its_new_task(ledger_factory):
    old, new = ledger_factory(), ledger_factory()
    _hand_over(old, new)
    row = new.get("a")
    assert (row.state, row.owner_pid, row.owner_started_at) == ("queued", None, None)
    assert row.task["goal"] == "resume me" and [r.delegation_id for r in new.queued_rows()] == ["a"]
    assert new.running_rows() == [] and new.pending_rows() == []
    assert [s.seq for s in new.read_steps("a")] == [0]  # the taker resumes from them
    assert not old.hand_over(old.get("a"), {"goal": "again"}, T0 + 3)  # only a running row of ours


def test_every_write_of_the_leaving_owner_is_refused_and_the_takers_land(ledger_factory):
    old, new = ledger_factory(), ledger_factory()
    row = _hand_over(old, new)
    assert not old.append_step("a", 0, 1, "reply", REPLY, OLD, T0 + 3)  # queued: nobody writes
    assert new.claim_queued("a", T0 + 4, NEW, 10) is not None
    taken = replace(row, owner_pid=NEW[0], owner_started_at=NEW[1])
    new.persist_dispatch(taken, T0 + 4)
    assert not old.append_step("a", 0, 1, "reply", REPLY, OLD, T0 + 5)
    assert not old.record_unit_child("a", {"task_index": 0, "status": "interrupted"}, T0 + 5)
    try:  # refused: SQLite and memory say so; PostgreSQL may only log it (its terminal write can ride another)
        old.persist_completion(row, event_for(row, "interrupted"), {"status": "interrupted"}, T0 + 5)
        assert old.location.startswith("postgresql"), "the leaving owner's terminal write was not refused"
    except LedgerError as exc:
        assert exc.kind == "fenced", exc
    assert new.get("a").state == "running" and new.get("a").result is None
    assert new.append_step("a", 0, 1, "reply", REPLY, NEW, T0 + 6)
    assert new.record_unit_child("a", {"task_index": 0, "status": "completed", "summary": "ok"}, T0 + 7)
    new.persist_completion(taken, event_for(taken), {"status": "completed", "results": []}, T0 + 8)
    assert new.get("a").state == "completed"


def test_a_take_over_of_a_queued_unit_fences_the_owner_that_took_it_before(ledger_factory):
    first, second = ledger_factory(), ledger_factory()
    row = dispatch_row("a")
    first.enqueue_unit(row, T0)
    assert first.claim_queued("a", T0 + 1, OLD, 10) is not None
    first.persist_dispatch(row, T0 + 1)
    first.requeue_unit(row, T0 + 2)  # it could not start after all: back in its place
    assert second.claim_queued("a", T0 + 3, OLD, 10) is not None  # same pid, another instance: a new epoch
    second.persist_dispatch(row, T0 + 3)
    assert not first.append_step("a", 0, 0, "reply", REPLY, OLD, T0 + 4)
    assert second.append_step("a", 0, 0, "reply", REPLY, OLD, T0 + 4)
