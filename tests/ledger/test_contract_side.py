"""The ledger contract for the side tables: control requests (stop a unit another process or
host owns) and activity snapshots (what another process's units are doing). Every backend
of ``BACKENDS``; explicit ``now`` everywhere, no clock, no sleep."""
from __future__ import annotations

import threading

import pytest

from tests.ledger.test_contract import T0, dispatch_row, ledger, ledger_factory  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(60)


def test_a_request_is_taken_once_by_the_owner_and_only_for_owned_units(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    ledger.request_control("a", "interrupt", T0, T0 + 60)
    assert ledger.take_control(["b"], T0 + 1) == []  # not ours: left for the owner
    assert ledger.take_control(["a", "b"], T0 + 1) == [("a", "interrupt")]
    assert ledger.take_control(["a"], T0 + 2) == []


def test_requested_controls_lists_unexpired_requests_without_taking_them(ledger):
    assert ledger.requested_controls(T0) == []
    ledger.request_control("a", "interrupt", T0, T0 + 5)
    ledger.request_control("b", "interrupt", T0, T0 + 50)
    assert sorted(ledger.requested_controls(T0 + 1)) == ["a", "b"]
    assert ledger.requested_controls(T0 + 10) == ["b"]
    assert ledger.take_control(["b"], T0 + 10) == [("b", "interrupt")]


def test_an_expired_request_is_never_taken_and_is_removed(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    ledger.request_control("a", "interrupt", T0, T0 + 5)
    assert ledger.take_control(["a"], T0 + 5) == []
    ledger.request_control("b", "interrupt", T0, T0 + 5)
    assert ledger.take_control(["x"], T0 + 6) == []
    assert ledger.take_control(["b"], T0 + 1) == []  # removed by the previous take, not merely skipped


def test_a_withdrawn_request_is_not_taken_and_a_repeat_replaces_the_expiry(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    ledger.request_control("a", "interrupt", T0, T0 + 5)
    ledger.withdraw_control("a")
    assert ledger.take_control(["a"], T0 + 1) == []
    ledger.request_control("a", "interrupt", T0, T0 + 5)
    ledger.request_control("a", "interrupt", T0 + 4, T0 + 50)
    assert ledger.take_control(["a"], T0 + 10) == [("a", "interrupt")]


def test_a_request_made_by_one_instance_is_taken_by_another(ledger_factory):
    requester, owner = ledger_factory(), ledger_factory()
    owner.persist_dispatch(dispatch_row("a"), T0)
    requester.request_control("a", "interrupt", T0, T0 + 60)
    assert owner.take_control(["a"], T0 + 1) == [("a", "interrupt")]


def test_of_racing_takers_exactly_one_gets_the_request(ledger_factory):
    takers = [ledger_factory() for _ in range(4)]
    takers[0].persist_dispatch(dispatch_row("a"), T0)
    takers[0].request_control("a", "interrupt", T0, T0 + 60)
    got: list[list] = []
    start = threading.Barrier(len(takers))

    def take(instance) -> None:
        start.wait()
        got.append(instance.take_control(["a"], T0 + 1))
    threads = [threading.Thread(target=take, args=(t,)) for t in takers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(map(len, got)) == [0, 0, 0, 1]


def test_reads_and_takes_of_a_ledger_without_side_tables_return_nothing(ledger):
    assert ledger.take_control(["a"], T0) == []
    assert ledger.requested_controls(T0) == []
    assert ledger.read_activity(["a"]) == {}
    ledger.withdraw_control("a")  # nothing to withdraw: not an error


def test_activity_snapshots_round_trip_replace_and_go(ledger_factory):
    writer, reader = ledger_factory(), ledger_factory()
    writer.persist_dispatch(dispatch_row("a"), T0)
    snapshot = {"status": "running", "children": [{"api_calls": 3, "current_tool": "web_search <x>"}]}
    writer.write_activity({"a": snapshot, "b": {"status": "running"}}, [], T0 + 1)
    assert reader.read_activity(["a", "c"]) == {"a": (T0 + 1, snapshot)}
    writer.write_activity({"a": {"status": "stalling"}}, ["c"], T0 + 3)  # "b" has no running row
    assert reader.read_activity(["a", "b"]) == {"a": (T0 + 3, {"status": "stalling"})}
    assert reader.read_activity([]) == {}
    writer.write_activity({}, ["a"], T0 + 4)
    assert reader.read_activity(["a"]) == {}


def test_a_snapshot_left_by_an_exited_owner_goes_with_the_next_withdrawal(ledger):
    ledger.persist_dispatch(dispatch_row("a"), T0)
    ledger.persist_dispatch(dispatch_row("live"), T0)
    ledger.write_activity({"a": {"status": "running"}, "live": {"status": "running"}}, [], T0 + 1)
    ledger.persist_completion(dispatch_row("a"), {"status": "completed", "completed_at": T0 + 2}, {}, T0 + 2)
    ledger.write_activity({}, ["other"], T0 + 3)
    assert set(ledger.read_activity(["a", "live"])) == {"live"}


# -- the journal -------------------------------------------------------------------------------
def test_journal_entries_read_back_in_append_order_per_unit(ledger_factory):
    from offload.ledger import JournalEntry

    writer, reader = ledger_factory(), ledger_factory()
    writer.persist_dispatch(dispatch_row("deleg_a"), T0)
    assert reader.read_journal("deleg_a") == []  # before the table exists: nothing, and not created
    writer.append_journal([JournalEntry("deleg_a", T0 + 1, "stall", None, {"quiet_s": 450.0}),
                           JournalEntry("deleg_b", T0 + 1, "interrupt", None, {"reason": "user"}),
                           JournalEntry("deleg_a", T0 + 2, "message", 1, {"role": "assistant", "content": "<b>x</b>"})])
    writer.append_journal([JournalEntry("deleg_a", T0 + 0.5, "interrupt", None, {"reason": "stall"})])
    found = reader.read_journal("deleg_a")
    assert [(e.kind, e.child, e.at) for e in found] == [("stall", None, T0 + 1), ("message", 1, T0 + 2),
                                                         ("interrupt", None, T0 + 0.5)]  # append order, not time
    assert found[1].data == {"role": "assistant", "content": "<b>x</b>"}
    writer.append_journal([])  # nothing to write: no error


def test_journal_entries_go_with_their_pruned_row(ledger):
    from offload.ledger import JournalEntry

    ledger.persist_dispatch(dispatch_row("deleg_kept"), T0)
    ledger.persist_dispatch(dispatch_row("deleg_old"), T0)
    ledger.persist_completion(dispatch_row("deleg_old"), {"status": "completed"}, {}, T0 + 1)
    ledger.mark_delivered("deleg_old", T0 + 2)
    ledger.append_journal([JournalEntry(did, T0 + 1, "stall") for did in ("deleg_kept", "deleg_old")])
    assert ledger.prune(T0 + 10_000, retention_s=10, max_settled=100) == 1
    assert ledger.read_journal("deleg_old") == []
    assert [e.kind for e in ledger.read_journal("deleg_kept")] == ["stall"]
