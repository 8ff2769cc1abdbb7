"""The ledger contract for background children's step logs (``offload.ledger.step_table``):
append fenced by ownership, read in order, dropped with the result or the pruned row. Every
backend of ``BACKENDS``; explicit ``now`` everywhere, no clock, no sleep."""
from __future__ import annotations

import pytest

from tests.ledger.test_contract import T0, dispatch_row, event_for, ledger, ledger_factory  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(60)
OWNER = (4242, 987654)  # dispatch_row's owner


def _reply(n: int) -> dict:
    return {"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}]}}


def test_steps_are_read_back_in_order_per_child(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    assert ledger.append_step("a", 1, 0, "reply", _reply(0), OWNER, T0 + 1)
    assert ledger.append_step("a", 0, 0, "reply", _reply(1), OWNER, T0 + 2)
    assert ledger.append_step("a", 0, 1, "tool_start", {"call_id": "c1", "name": "write_file"}, OWNER, T0 + 3)
    assert ledger.append_step("a", 0, 2, "tool_result", {"call_id": "c1", "content": "x" * 50_000}, OWNER, T0 + 4)
    steps = ledger.read_steps("a")
    assert [(s.task_index, s.seq, s.kind) for s in steps] == [(0, 0, "reply"), (0, 1, "tool_start"),
                                                               (0, 2, "tool_result"), (1, 0, "reply")]
    assert steps[0].payload == _reply(1) and steps[2].payload["content"] == "x" * 50_000
    assert steps[1].written_at == T0 + 3 and ledger.read_steps("b") == []


def test_a_step_is_written_once(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    ledger.append_step("a", 0, 0, "reply", _reply(0), OWNER, T0 + 1)
    ledger.append_step("a", 0, 0, "reply", _reply(9), OWNER, T0 + 2)
    assert [s.payload for s in ledger.read_steps("a")] == [_reply(0)]


def test_no_step_is_written_for_a_finished_or_missing_unit(ledger):
    row = dispatch_row("a")
    ledger.persist_dispatch(row, T0)
    ledger.persist_completion(row, event_for(row), {"status": "completed"}, T0 + 5)
    assert not ledger.append_step("a", 0, 0, "reply", _reply(0), OWNER, T0 + 6)
    assert not ledger.append_step("missing", 0, 0, "reply", _reply(0), OWNER, T0 + 6)
    assert ledger.read_steps("a") == [] and ledger.read_steps("missing") == []


def test_an_unknown_kind_is_refused_naming_the_kinds(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    with pytest.raises(ValueError, match="reply, tool_start, tool_result, compression"):
        ledger.append_step("a", 0, 0, "thought", {}, OWNER, T0)


def test_drop_steps_forgets_one_unit_only(ledger):
    for unit in ("a", "b"):
        ledger.persist_dispatch(dispatch_row(unit), T0)
        ledger.append_step(unit, 0, 0, "reply", _reply(0), OWNER, T0 + 1)
    ledger.drop_steps("a")
    assert ledger.read_steps("a") == [] and len(ledger.read_steps("b")) == 1


def test_prune_deletes_the_steps_of_pruned_rows(ledger):
    row = dispatch_row("a")
    ledger.persist_dispatch(row, T0)
    ledger.append_step("a", 0, 0, "reply", _reply(0), OWNER, T0 + 1)
    ledger.persist_completion(row, event_for(row, completed_at=T0 + 2), {"status": "completed"}, T0 + 2)
    ledger.mark_delivered("a", T0 + 3)
    assert ledger.prune(T0 + 10_000, retention_s=60, max_settled=100) == 1
    assert ledger.read_steps("a") == []


def test_only_the_units_owner_may_append(ledger, ledger_factory):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    other = ledger_factory()  # another process: another pid and start time (on PostgreSQL, no lease of it)
    assert not other.append_step("a", 0, 0, "reply", _reply(0), (OWNER[0] + 1, OWNER[1]), T0 + 1)
    assert ledger.read_steps("a") == []
    assert ledger.append_step("a", 0, 0, "reply", _reply(0), OWNER, T0 + 1)


def test_several_steps_of_a_child_are_one_write_fenced_as_one(ledger, ledger_factory):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    other = ledger_factory()
    steps = [(0, "reply", _reply(0)), (1, "tool_start", {"call_id": "c0", "name": "write_file"})]
    assert not other.append_steps("a", 0, steps, (OWNER[0] + 1, OWNER[1]), T0 + 1)
    assert ledger.read_steps("a") == []  # refused whole
    assert ledger.append_steps("a", 0, steps, OWNER, T0 + 1)
    assert ledger.append_steps("a", 0, [(2, "tool_result", {"call_id": "c0", "content": "ok"})], OWNER, T0 + 2)
    assert [(s.seq, s.kind, s.written_at) for s in ledger.read_steps("a")] == [
        (0, "reply", T0 + 1), (1, "tool_start", T0 + 1), (2, "tool_result", T0 + 2)]
    with pytest.raises(ValueError, match="expected one of"):
        ledger.append_steps("a", 0, [(3, "tool_result", {}), (4, "thought", {})], OWNER, T0 + 3)
    assert len(ledger.read_steps("a")) == 3  # nothing of a batch with a bad kind
