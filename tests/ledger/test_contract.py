"""The ledger contract: what every backend of ``DelegationLedger`` must do, exactly.

Each test runs once per backend in ``BACKENDS``. A backend entry takes ``tmp_path`` and
returns a *factory*: every call of the factory opens a new, independent ledger instance on
the same store (the concurrency test needs one instance per thread, as one per process).
Adding a backend (PostgreSQL) is one line in ``BACKENDS``.

All times are explicit ``now`` arguments, so nothing here reads a clock or sleeps.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

from offload.ledger import DelegationLedger, DispatchRow, open_ledger
from tests.postgres_support import FreshSchema

LedgerFactory = Callable[[], DelegationLedger]


def pg_factory_for_test(tmp_path) -> LedgerFactory:
    """Ledgers on one fresh schema of the test PostgreSQL server, dropped afterwards (skipped
    locally without a server, naming the command that starts one; a failure when CI=true)."""
    schema = FreshSchema()
    factory = lambda: open_ledger(schema.url)  # noqa: E731
    factory.cleanup = schema.drop  # type: ignore[attr-defined]
    return factory

# Each entry opens its backend through open_ledger(), the way the engine does. The memory
# store is named after the test's tmp_path, so instances of one test share it and tests don't.
BACKENDS: dict[str, Callable[[Any], LedgerFactory]] = {
    "sqlite": lambda tmp_path: (lambda: open_ledger(tmp_path / "state.db")),
    "memory": lambda tmp_path: (lambda: open_ledger(f"memory://{tmp_path}")),
    "postgresql": pg_factory_for_test,  # one schema per test
}

T0 = 1_000_000.0  # a fixed epoch for every test
LEASE_S = 300.0


@pytest.fixture(params=sorted(BACKENDS))
def ledger_factory(request, tmp_path) -> LedgerFactory:
    opened: list[DelegationLedger] = []
    make = BACKENDS[request.param](tmp_path)

    def factory() -> DelegationLedger:
        instance = make()
        opened.append(instance)
        return instance

    yield factory
    for instance in opened:
        instance.close()
    getattr(make, "cleanup", lambda: None)()


@pytest.fixture
def ledger(ledger_factory) -> DelegationLedger:
    return ledger_factory()


def dispatch_row(delegation_id: str = "deleg_0001", **overrides: Any) -> DispatchRow:
    fields: dict[str, Any] = dict(
        delegation_id=delegation_id, origin_session="agent:main:telegram:dm:42", dispatched_at=T0,
        task={"goal": "summarize the repo", "is_batch": False, "owner_cwd": "/srv/work"},
        origin_ui_session_id="ui-7", origin_session_id="api-9", parent_session_id="sess-parent",
        owner_pid=4242, owner_started_at=987654,
    )
    fields.update(overrides)
    return DispatchRow(**fields)


def event_for(row: DispatchRow, status: str = "completed", completed_at: float = T0 + 10, **extra: Any) -> dict:
    return {"type": "async_delegation", "delegation_id": row.delegation_id, "status": status,
            "completed_at": completed_at, "summary": f"done {row.delegation_id}", **extra}


def terminal(ledger: DelegationLedger, delegation_id: str, *, completed_at: float = T0 + 10,
             status: str = "completed") -> DispatchRow:
    """A row dispatched at T0 and finished at ``completed_at``: pending delivery."""
    row = dispatch_row(delegation_id)
    ledger.persist_dispatch(row, T0)
    ledger.persist_completion(row, event_for(row, status, completed_at), {"status": status}, completed_at)
    return row


# -- dispatch and get ---------------------------------------------------------------------------
def test_persist_dispatch_round_trips_every_field(ledger):
    row = dispatch_row(task={"goal": "g", "goals": ["a", "b"], "is_batch": True, "task_indexes": [0, 1],
                             "toolsets": ["web"], "owner_cwd": "/srv/work", "note": "ünïcode"})
    ledger.persist_dispatch(row, T0 + 1)

    got = ledger.get(row.delegation_id)

    assert got is not None
    assert (got.delegation_id, got.origin_session, got.state) == (row.delegation_id, row.origin_session, "running")
    assert (got.dispatched_at, got.completed_at, got.updated_at) == (T0, None, T0 + 1)
    assert (got.origin_ui_session_id, got.origin_session_id, got.parent_session_id) == ("ui-7", "api-9", "sess-parent")
    assert got.task == row.task
    assert (got.event, got.result) == (None, None)
    assert (got.delivery_state, got.delivery_attempts, got.delivered_at) == ("pending", 0, None)
    assert (got.delivery_claim, got.delivery_claimed_at) == (None, None)
    assert (got.owner_pid, got.owner_started_at) == (4242, 987654)


def test_optional_dispatch_fields_default(ledger):
    row = DispatchRow("deleg_min", "", T0, {"goal": "g"})
    ledger.persist_dispatch(row, T0)

    got = ledger.get("deleg_min")

    assert (got.origin_session, got.origin_ui_session_id, got.origin_session_id) == ("", "", "")
    assert (got.parent_session_id, got.owner_pid, got.owner_started_at) == (None, None, None)


def test_get_of_a_missing_id_is_none(ledger):
    ledger.persist_dispatch(dispatch_row("deleg_a"), T0)
    assert ledger.get("deleg_missing") is None


def test_exists_turns_true_with_the_first_write(ledger):
    assert ledger.exists() is False
    ledger.persist_dispatch(dispatch_row(), T0)
    assert ledger.exists() is True


def test_forget_removes_the_row_and_ignores_a_missing_one(ledger):
    ledger.persist_dispatch(dispatch_row("deleg_a"), T0)
    ledger.persist_dispatch(dispatch_row("deleg_b"), T0)

    ledger.forget("deleg_a")
    ledger.forget("deleg_never")

    assert ledger.get("deleg_a") is None
    assert ledger.get("deleg_b") is not None


# -- per-child records ------------------------------------------------------------------------------
def test_record_unit_child_adds_entries_as_partial_results(ledger):
    ledger.persist_dispatch(dispatch_row(), T0)

    assert ledger.record_unit_child("deleg_0001", {"task_index": 0, "status": "completed", "summary": "a"}, T0 + 1)
    assert ledger.record_unit_child("deleg_0001", {"task_index": 2, "status": "error", "error": "boom"}, T0 + 2)

    got = ledger.get("deleg_0001")
    assert got.state == "running"
    assert got.result["partial"] is True
    assert sorted(got.result["results"], key=lambda r: r["task_index"]) == [
        {"task_index": 0, "status": "completed", "summary": "a"},
        {"task_index": 2, "status": "error", "error": "boom"},
    ]
    assert got.updated_at == T0 + 2


def test_record_unit_child_replaces_the_entry_of_the_same_task_index(ledger):
    ledger.persist_dispatch(dispatch_row(), T0)
    ledger.record_unit_child("deleg_0001", {"task_index": 1, "status": "error", "summary": "first"}, T0 + 1)

    assert ledger.record_unit_child("deleg_0001", {"task_index": 1, "status": "completed", "summary": "retry"}, T0 + 2)

    assert ledger.get("deleg_0001").result["results"] == [{"task_index": 1, "status": "completed", "summary": "retry"}]


def test_record_unit_child_refuses_once_the_row_is_terminal(ledger):
    terminal(ledger, "deleg_0001")
    before = ledger.get("deleg_0001")

    assert ledger.record_unit_child("deleg_0001", {"task_index": 0, "status": "completed"}, T0 + 50) is False

    after = ledger.get("deleg_0001")
    assert after.result == before.result == {"status": "completed"}
    assert after.updated_at == before.updated_at


def test_record_unit_child_of_a_missing_row_is_false(ledger):
    ledger.persist_dispatch(dispatch_row("deleg_a"), T0)
    assert ledger.record_unit_child("deleg_missing", {"task_index": 0}, T0) is False
    assert ledger.get("deleg_missing") is None


# -- terminal write ----------------------------------------------------------------------------------
def test_persist_completion_moves_the_state_and_stores_event_and_result(ledger):
    row = dispatch_row()
    ledger.persist_dispatch(row, T0)
    ledger.record_unit_child(row.delegation_id, {"task_index": 0, "status": "completed"}, T0 + 1)
    event = event_for(row, "error", T0 + 5, error="model refused")
    result = {"status": "error", "error": "model refused", "api_calls": 3}

    ledger.persist_completion(row, event, result, T0 + 6)

    got = ledger.get(row.delegation_id)
    assert got.state == "error"
    assert (got.completed_at, got.updated_at) == (T0 + 5, T0 + 6)
    assert got.event == event
    assert got.result == result
    assert (got.delivery_state, got.delivery_claim) == ("pending", None)
    assert got.task == row.task and got.owner_pid == row.owner_pid


def test_persist_completion_without_completed_at_uses_now(ledger):
    row = dispatch_row()
    ledger.persist_dispatch(row, T0)
    event = event_for(row)
    del event["completed_at"]

    ledger.persist_completion(row, event, {}, T0 + 7)

    assert ledger.get(row.delegation_id).completed_at == T0 + 7


def test_persist_completion_upserts_the_whole_row_when_it_vanished(ledger):
    row = dispatch_row()
    ledger.persist_dispatch(row, T0)
    ledger.forget(row.delegation_id)
    event = event_for(row)

    ledger.persist_completion(row, event, {"status": "completed"}, T0 + 11)

    got = ledger.get(row.delegation_id)
    assert got is not None
    assert (got.state, got.event, got.result) == ("completed", event, {"status": "completed"})
    assert (got.origin_session, got.origin_ui_session_id, got.origin_session_id, got.parent_session_id) == (
        row.origin_session, row.origin_ui_session_id, row.origin_session_id, row.parent_session_id)
    assert (got.dispatched_at, got.task, got.owner_pid, got.owner_started_at) == (
        T0, row.task, row.owner_pid, row.owner_started_at)
    assert (got.delivery_state, got.delivery_attempts) == ("pending", 0)
    assert [r.delegation_id for r in ledger.pending_rows()] == [row.delegation_id]


# -- recovery ----------------------------------------------------------------------------------------
def test_running_rows_lists_only_running_rows_oldest_first(ledger):
    ledger.persist_dispatch(dispatch_row("deleg_late", dispatched_at=T0 + 5), T0 + 5)
    ledger.persist_dispatch(dispatch_row("deleg_early", dispatched_at=T0 + 1), T0 + 1)
    terminal(ledger, "deleg_done")

    assert [r.delegation_id for r in ledger.running_rows()] == ["deleg_early", "deleg_late"]
    assert all(r.state == "running" for r in ledger.running_rows())


def test_settle_abandoned_marks_a_running_row_unknown_and_pending(ledger):
    ledger.persist_dispatch(dispatch_row(), T0)
    event = {"type": "async_delegation", "delegation_id": "deleg_0001", "status": "unknown", "error": "owner died"}
    result = {"status": "unknown", "error": "owner died"}

    assert ledger.settle_abandoned("deleg_0001", event, result, T0 + 20) is True

    got = ledger.get("deleg_0001")
    assert (got.state, got.event, got.result) == ("unknown", event, result)
    assert (got.completed_at, got.updated_at, got.delivery_state) == (T0 + 20, T0 + 20, "pending")
    assert ledger.running_rows() == []
    assert [r.delegation_id for r in ledger.pending_rows()] == ["deleg_0001"]


def test_settle_abandoned_is_false_once_the_row_is_no_longer_running(ledger):
    ledger.persist_dispatch(dispatch_row("deleg_run"), T0)
    ledger.settle_abandoned("deleg_run", {"status": "unknown"}, {}, T0 + 1)
    terminal(ledger, "deleg_done")
    done_before = ledger.get("deleg_done")

    assert ledger.settle_abandoned("deleg_run", {"status": "unknown", "second": True}, {}, T0 + 2) is False
    assert ledger.settle_abandoned("deleg_done", {"status": "unknown"}, {}, T0 + 2) is False
    assert ledger.settle_abandoned("deleg_missing", {"status": "unknown"}, {}, T0 + 2) is False

    assert ledger.get("deleg_run").event == {"status": "unknown"}
    assert ledger.get("deleg_done") == done_before


# -- replay selection --------------------------------------------------------------------------------
def test_pending_rows_are_terminal_pending_rows_with_an_event_oldest_first(ledger):
    terminal(ledger, "deleg_c", completed_at=T0 + 30)
    terminal(ledger, "deleg_a", completed_at=T0 + 10)
    terminal(ledger, "deleg_b", completed_at=T0 + 20, status="error")
    ledger.persist_dispatch(dispatch_row("deleg_running"), T0)
    terminal(ledger, "deleg_delivered", completed_at=T0 + 5)
    ledger.mark_delivered("deleg_delivered", T0 + 40)
    terminal(ledger, "deleg_dropped", completed_at=T0 + 6)
    ledger.drop_delivery("deleg_dropped", None, T0 + 40)

    rows = ledger.pending_rows()

    assert [r.delegation_id for r in rows] == ["deleg_a", "deleg_b", "deleg_c"]
    assert [r.event["status"] for r in rows] == ["completed", "error", "completed"]
    assert all(r.delivery_state == "pending" for r in rows)


def test_unit_counts_since_count_the_rows_that_finished_recently_in_the_same_read(ledger):
    ledger.persist_dispatch(dispatch_row("deleg_running_1"), T0)
    ledger.persist_dispatch(dispatch_row("deleg_running_2"), T0)
    terminal(ledger, "deleg_old_failure", completed_at=T0 + 10, status="failed")
    terminal(ledger, "deleg_new_failure", completed_at=T0 + 100, status="failed")
    terminal(ledger, "deleg_new_stall", completed_at=T0 + 100, status="stalled")
    terminal(ledger, "deleg_delivered", completed_at=T0 + 100)
    ledger.mark_delivered("deleg_delivered", T0 + 110)

    counts = ledger.unit_counts(since=T0 + 50)

    assert counts.rows == {("running", "pending"): 2, ("failed", "pending"): 2, ("stalled", "pending"): 1,
                           ("completed", "delivered"): 1}
    assert counts.recent == {("failed", "pending"): 1, ("stalled", "pending"): 1, ("completed", "delivered"): 1}
    assert ledger.unit_counts(since=T0 + 100).recent == counts.recent  # at or after: the boundary counts
    assert ledger.unit_counts(since=T0 + 101).recent == {}
    assert ledger.unit_counts().recent == {} and ledger.unit_counts().rows == counts.rows  # no since: none recent


def test_unit_counts_since_count_the_recent_early_stops_by_their_reason(ledger):
    """The overview's stalled / failed counters read the event's ``stop_reason`` (issue 41)."""
    def stopped(delegation_id: str, status: str, reason: str | None, completed_at: float = T0 + 100) -> None:
        row = dispatch_row(delegation_id)
        ledger.persist_dispatch(row, T0)
        event = {**event_for(row, status, completed_at), "stop_reason": reason,
                 "summary": 'quoting "stop_reason": "user" in a summary counts nothing'}
        ledger.persist_completion(row, event, {"status": status}, completed_at)
    stopped("deleg_stall_honoured", "interrupted", "stall")
    stopped("deleg_stall_given_up", "stalled", "stall")
    stopped("deleg_user_stop", "interrupted", "user")
    stopped("deleg_plain_failure", "failed", None)
    stopped("deleg_old_stop", "interrupted", "user", completed_at=T0 + 10)
    stopped("deleg_completed_anyway", "completed", "user")

    counts = ledger.unit_counts(since=T0 + 50)

    assert counts.recent_stops == {("interrupted", "stall"): 1, ("stalled", "stall"): 1, ("interrupted", "user"): 1}
    assert ledger.unit_counts().recent_stops == {}


def test_unit_counts_since_of_an_empty_ledger_are_empty(ledger):
    counts = ledger.unit_counts(since=T0)
    assert (counts.rows, counts.recent, counts.pruned) == ({}, {}, {})


def test_pending_rows_break_completion_ties_by_id(ledger):
    terminal(ledger, "deleg_b", completed_at=T0 + 10)
    terminal(ledger, "deleg_a", completed_at=T0 + 10)

    assert [r.delegation_id for r in ledger.pending_rows()] == ["deleg_a", "deleg_b"]


def test_undelivered_rows_of_a_session_are_its_running_and_finished_pending_rows(ledger):
    ledger.persist_dispatch(dispatch_row("deleg_by_key", origin_session="sess-a", parent_session_id=None,
                                         origin_session_id=""), T0)
    terminal(ledger, "deleg_by_parent")  # parent_session_id sess-parent, as every row of dispatch_row()
    ledger.persist_dispatch(dispatch_row("deleg_by_origin", origin_session="k", parent_session_id="p",
                                         origin_session_id="sess-a", dispatched_at=T0 + 1), T0 + 1)
    row = dispatch_row("deleg_done", origin_session="sess-a", dispatched_at=T0 + 2)
    ledger.persist_dispatch(row, T0 + 2)
    ledger.persist_completion(row, event_for(row), {"status": "completed"}, T0 + 3)
    delivered = dispatch_row("deleg_delivered", origin_session="sess-a")
    ledger.persist_completion(delivered, event_for(delivered), {"status": "completed"}, T0 + 3)
    ledger.mark_delivered("deleg_delivered", T0 + 4)
    ledger.persist_dispatch(dispatch_row("deleg_other", origin_session="sess-b"), T0)

    assert [r.delegation_id for r in ledger.undelivered_rows("sess-a")] == [
        "deleg_by_key", "deleg_by_origin", "deleg_done"]
    assert [r.state for r in ledger.undelivered_rows("sess-a")] == ["running", "running", "completed"]
    assert [r.delegation_id for r in ledger.undelivered_rows("sess-parent")] == [
        "deleg_by_parent", "deleg_other", "deleg_done"]
    assert ledger.undelivered_rows("sess-none") == []


# -- claims -----------------------------------------------------------------------------------------
def test_claim_is_granted_once_and_counts_an_attempt(ledger):
    terminal(ledger, "deleg_0001")

    assert ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S) is True
    assert ledger.claim_delivery("deleg_0001", "B", T0 + 101, LEASE_S) is False

    got = ledger.get("deleg_0001")
    assert (got.delivery_claim, got.delivery_claimed_at, got.delivery_attempts) == ("A", T0 + 100, 1)


def test_a_claim_records_its_holder_and_is_abandoned_only_when_the_holder_is_known_dead(ledger):
    terminal(ledger, "deleg_live")
    terminal(ledger, "deleg_dead")
    terminal(ledger, "deleg_unknown")
    ledger.claim_delivery("deleg_live", "A", T0 + 100, LEASE_S, holder=(1001, 77))
    ledger.claim_delivery("deleg_dead", "B", T0 + 100, LEASE_S, holder=(1002, 78))
    ledger.claim_delivery("deleg_unknown", "C", T0 + 100, LEASE_S)  # made without a holder (an older version)
    alive = lambda pid, started: (pid, started) == (1001, 77)  # noqa: E731 - the local pid check

    claimed = {r.delegation_id: r for r in ledger.claimed_rows()}

    assert sorted(claimed) == ["deleg_dead", "deleg_live", "deleg_unknown"]
    assert (claimed["deleg_live"].delivery_claim_pid, claimed["deleg_live"].delivery_claim_started_at) == (1001, 77)
    assert [ledger.claim_abandoned(claimed[i], alive) for i in ("deleg_live", "deleg_dead", "deleg_unknown")] == [
        False, True, False]
    ledger.complete_delivery("deleg_live", "A", T0 + 101)
    assert sorted(r.delegation_id for r in ledger.claimed_rows()) == ["deleg_dead", "deleg_unknown"]


def test_drop_reasons_are_kept_and_an_acknowledgement_clears_them(ledger):
    for did in ("deleg_dropped", "deleg_spent", "deleg_acked"):
        terminal(ledger, did)
    assert ledger.drop_delivery("deleg_dropped", None, T0 + 100, "chat 7 is not allowed") is True
    ledger.claim_delivery("deleg_spent", "A", T0 + 100, LEASE_S)
    assert ledger.release_delivery("deleg_spent", "A", T0 + 101, 1, "the chat could not be reached") == "dropped"
    ledger.drop_delivery("deleg_acked", None, T0 + 100, "given up")
    assert ledger.mark_delivered("deleg_acked", T0 + 102) is True

    reasons = {i: ledger.get(i).drop_reason for i in ("deleg_dropped", "deleg_spent", "deleg_acked")}
    assert reasons == {"deleg_dropped": "chat 7 is not allowed", "deleg_spent": "the chat could not be reached",
                       "deleg_acked": None}
    assert {r.delegation_id: r.drop_reason for r in ledger.settled_rows(10)}["deleg_dropped"] == "chat 7 is not allowed"


def test_progress_is_recorded_under_the_claim_survives_a_release_and_resets_with_a_new_result(ledger):
    row = terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)
    assert ledger.record_progress("deleg_0001", "B", 2, T0 + 101) is False  # not the holder
    assert ledger.record_progress("deleg_0001", "A", 2, T0 + 101) is True
    assert ledger.release_delivery("deleg_0001", "A", T0 + 102, 8) == "pending"
    ledger.claim_delivery("deleg_0001", "B", T0 + 103, LEASE_S)

    assert ledger.get("deleg_0001").delivery_progress == 2  # the next attempt resumes after part 2
    ledger.persist_dispatch(row, T0 + 200)  # the same id dispatched again (a retried queue insert)
    ledger.persist_completion(row, event_for(row, completed_at=T0 + 210), {"status": "completed"}, T0 + 210)
    assert ledger.get("deleg_0001").delivery_progress == 0  # a new result is shown from its start


def test_claim_within_the_lease_is_refused_and_after_it_granted(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)

    assert ledger.claim_delivery("deleg_0001", "B", T0 + 100 + LEASE_S, LEASE_S) is False  # not yet expired
    assert ledger.claim_delivery("deleg_0001", "B", T0 + 100 + LEASE_S + 1, LEASE_S) is True

    got = ledger.get("deleg_0001")
    assert (got.delivery_claim, got.delivery_attempts) == ("B", 2)
    assert ledger.complete_delivery("deleg_0001", "A", T0 + 500) is False  # the expired claim is worthless


def test_claim_of_a_missing_row_is_none(ledger):
    terminal(ledger, "deleg_0001")
    assert ledger.claim_delivery("deleg_missing", "A", T0, LEASE_S) is None


def test_complete_with_the_wrong_claim_is_false_and_with_the_right_claim_delivers(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)

    assert ledger.complete_delivery("deleg_0001", "B", T0 + 101) is False
    assert ledger.get("deleg_0001").delivery_state == "pending"

    assert ledger.complete_delivery("deleg_0001", "A", T0 + 102) is True
    got = ledger.get("deleg_0001")
    assert (got.delivery_state, got.delivered_at, got.delivery_claim) == ("delivered", T0 + 102, None)
    assert ledger.complete_delivery("deleg_0001", "A", T0 + 103) is False
    assert ledger.pending_rows() == []


def test_complete_of_a_missing_row_is_false(ledger):
    terminal(ledger, "deleg_0001")
    assert ledger.complete_delivery("deleg_missing", "A", T0) is False


def test_a_delivered_row_cannot_be_claimed_even_after_the_lease(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)
    ledger.complete_delivery("deleg_0001", "A", T0 + 101)

    assert ledger.claim_delivery("deleg_0001", "B", T0 + 102, LEASE_S) is False
    assert ledger.claim_delivery("deleg_0001", "B", T0 + 10 * LEASE_S, LEASE_S) is False
    assert ledger.get("deleg_0001").delivery_attempts == 1


def test_release_with_the_wrong_claim_changes_nothing(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)

    assert ledger.release_delivery("deleg_0001", "B", T0 + 101, 8) == ""
    assert ledger.release_delivery("deleg_missing", "A", T0 + 101, 8) == ""

    got = ledger.get("deleg_0001")
    assert (got.delivery_state, got.delivery_claim, got.delivery_attempts) == ("pending", "A", 1)


def test_release_under_the_budget_makes_the_row_claimable_again_and_keeps_the_attempt(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)

    assert ledger.release_delivery("deleg_0001", "A", T0 + 101, 8) == "pending"

    got = ledger.get("deleg_0001")
    assert (got.delivery_state, got.delivery_claim, got.delivery_attempts) == ("pending", None, 1)
    assert ledger.claim_delivery("deleg_0001", "B", T0 + 102, LEASE_S) is True  # no lease wait
    assert ledger.get("deleg_0001").delivery_attempts == 2


def test_release_that_reaches_the_attempt_budget_drops_the_row(ledger):
    terminal(ledger, "deleg_0001")
    budget = 3
    states = []
    for attempt in range(budget):
        assert ledger.claim_delivery("deleg_0001", f"c{attempt}", T0 + 100 + attempt, LEASE_S) is True
        states.append(ledger.release_delivery("deleg_0001", f"c{attempt}", T0 + 100 + attempt, budget))

    assert states == ["pending", "pending", "dropped"]
    got = ledger.get("deleg_0001")
    assert (got.delivery_state, got.delivery_claim, got.delivery_attempts) == ("dropped", None, budget)
    assert got.event is not None  # dropped, not deleted: the result stays queryable
    assert ledger.pending_rows() == []
    assert ledger.claim_delivery("deleg_0001", "late", T0 + 10 * LEASE_S, LEASE_S) is False


def test_defer_clears_the_claim_and_gives_the_attempt_back(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)
    ledger.release_delivery("deleg_0001", "A", T0 + 100, 8)
    ledger.claim_delivery("deleg_0001", "B", T0 + 101, LEASE_S)
    assert ledger.get("deleg_0001").delivery_attempts == 2

    assert ledger.defer_delivery("deleg_0001", "wrong", T0 + 102) is False
    assert ledger.defer_delivery("deleg_0001", "B", T0 + 102) is True

    got = ledger.get("deleg_0001")
    assert (got.delivery_state, got.delivery_claim, got.delivery_attempts) == ("pending", None, 1)
    assert ledger.defer_delivery("deleg_0001", "B", T0 + 103) is False  # the claim is gone: no double refund
    assert ledger.get("deleg_0001").delivery_attempts == 1
    assert ledger.claim_delivery("deleg_0001", "C", T0 + 104, LEASE_S) is True


def test_claim_and_defer_cycles_cost_no_attempts(ledger):
    terminal(ledger, "deleg_0001")
    for step in range(3):
        ledger.claim_delivery("deleg_0001", "A", T0 + step, LEASE_S)
        ledger.defer_delivery("deleg_0001", "A", T0 + step)

    assert ledger.get("deleg_0001").delivery_attempts == 0


def test_drop_with_a_claim_needs_the_matching_claim(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)

    assert ledger.drop_delivery("deleg_0001", "B", T0 + 101) is False
    assert ledger.get("deleg_0001").delivery_state == "pending"

    assert ledger.drop_delivery("deleg_0001", "A", T0 + 102) is True
    got = ledger.get("deleg_0001")
    assert (got.delivery_state, got.delivery_claim) == ("dropped", None)
    assert ledger.drop_delivery("deleg_0001", "A", T0 + 103) is False


def test_drop_without_a_claim_is_unconditional_while_pending(ledger):
    terminal(ledger, "deleg_claimed")
    ledger.claim_delivery("deleg_claimed", "A", T0 + 100, LEASE_S)
    terminal(ledger, "deleg_free")
    terminal(ledger, "deleg_delivered")
    ledger.mark_delivered("deleg_delivered", T0 + 100)

    assert ledger.drop_delivery("deleg_claimed", None, T0 + 101) is True
    assert ledger.drop_delivery("deleg_free", None, T0 + 101) is True
    assert ledger.drop_delivery("deleg_delivered", None, T0 + 101) is False
    assert ledger.drop_delivery("deleg_missing", None, T0 + 101) is False

    assert [ledger.get(i).delivery_state for i in ("deleg_claimed", "deleg_free", "deleg_delivered")] == [
        "dropped", "dropped", "delivered"]
    assert ledger.complete_delivery("deleg_claimed", "A", T0 + 102) is False  # dropped is final


def test_mark_delivered_acknowledges_once(ledger):
    terminal(ledger, "deleg_0001")
    ledger.claim_delivery("deleg_0001", "A", T0 + 100, LEASE_S)

    assert ledger.mark_delivered("deleg_0001", T0 + 101) is True
    assert ledger.mark_delivered("deleg_0001", T0 + 102) is False
    assert ledger.mark_delivered("deleg_missing", T0 + 102) is False

    got = ledger.get("deleg_0001")
    assert (got.delivery_state, got.delivered_at, got.delivery_claim) == ("delivered", T0 + 101, None)
    assert ledger.pending_rows() == []


# -- pruning ----------------------------------------------------------------------------------------
def settled(ledger: DelegationLedger, delegation_id: str, at: float, *, how: str = "delivered") -> None:
    terminal(ledger, delegation_id, completed_at=at)
    if how == "delivered":
        ledger.mark_delivered(delegation_id, at)
    else:
        ledger.drop_delivery(delegation_id, None, at)


def ids(ledger: DelegationLedger, candidates) -> list[str]:
    return [i for i in candidates if ledger.get(i) is not None]


def test_settled_rows_are_delivered_and_dropped_ones_newest_first(ledger):
    settled(ledger, "deleg_a", T0 + 10)
    settled(ledger, "deleg_b", T0 + 30, how="dropped")
    settled(ledger, "deleg_c", T0 + 20)
    terminal(ledger, "deleg_pending", completed_at=T0 + 40)

    assert [r.delegation_id for r in ledger.settled_rows(10)] == ["deleg_b", "deleg_c", "deleg_a"]
    assert [r.delegation_id for r in ledger.settled_rows(1)] == ["deleg_b"]


def test_prune_deletes_settled_rows_past_retention_only(ledger):
    settled(ledger, "deleg_old_delivered", T0 + 10)
    settled(ledger, "deleg_old_dropped", T0 + 11, how="dropped")
    settled(ledger, "deleg_recent", T0 + 500)
    terminal(ledger, "deleg_old_pending", completed_at=T0 + 1)
    ledger.persist_dispatch(dispatch_row("deleg_old_running"), T0)

    deleted = ledger.prune(T0 + 600, retention_s=200, max_settled=100)

    assert deleted == 2
    assert ids(ledger, ["deleg_old_delivered", "deleg_old_dropped", "deleg_recent", "deleg_old_pending",
                        "deleg_old_running"]) == ["deleg_recent", "deleg_old_pending", "deleg_old_running"]


def test_prune_keeps_only_the_newest_max_settled_rows(ledger):
    for i in range(5):
        settled(ledger, f"deleg_s{i}", T0 + 100 + i, how="delivered" if i % 2 else "dropped")
    for i in range(4):
        terminal(ledger, f"deleg_p{i}", completed_at=T0 + i)
    ledger.persist_dispatch(dispatch_row("deleg_r"), T0)

    deleted = ledger.prune(T0 + 200, retention_s=10_000, max_settled=2)

    assert deleted == 3
    assert ids(ledger, [f"deleg_s{i}" for i in range(5)]) == ["deleg_s3", "deleg_s4"]
    assert ids(ledger, [f"deleg_p{i}" for i in range(4)] + ["deleg_r"]) == [
        "deleg_p0", "deleg_p1", "deleg_p2", "deleg_p3", "deleg_r"]


def test_prune_keeps_max_settled_rows_even_when_they_share_a_timestamp(ledger):
    # Rows settled in one tick (one ack of a coalesced fan-out) share updated_at.
    for i in range(3):
        settled(ledger, f"deleg_s{i}", T0 + 100)

    deleted = ledger.prune(T0 + 200, retention_s=10_000, max_settled=2)

    assert deleted == 1
    assert len(ids(ledger, [f"deleg_s{i}" for i in range(3)])) == 2


def test_prune_never_deletes_pending_or_running_rows(ledger):
    for i in range(3):
        terminal(ledger, f"deleg_p{i}", completed_at=T0 + i)
    ledger.persist_dispatch(dispatch_row("deleg_r"), T0)

    assert ledger.prune(T0 + 10**9, retention_s=0, max_settled=0) == 0
    assert len(ledger.pending_rows()) == 3
    assert [r.delegation_id for r in ledger.running_rows()] == ["deleg_r"]


def test_prune_with_nothing_to_do_returns_zero(ledger):
    settled(ledger, "deleg_s", T0 + 100)
    assert ledger.prune(T0 + 200, retention_s=10_000, max_settled=10) == 0
    assert ledger.get("deleg_s") is not None


# -- unit counts (what /metrics reads) --------------------------------------------------------------------
def test_unit_counts_of_an_empty_ledger_are_empty(ledger):
    counts = ledger.unit_counts()
    assert (counts.rows, counts.pruned, counts.delivery_attempts) == ({}, {}, 0)


def test_unit_counts_group_every_row_by_state_and_delivery_state(ledger):
    for i in range(1_200):  # past the settled rows a history page reads
        settled(ledger, f"deleg_s{i:04d}", T0 + 100)
    terminal(ledger, "deleg_failed", status="failed")
    terminal(ledger, "deleg_interrupted", status="interrupted")
    ledger.claim_delivery("deleg_failed", "c1", T0 + 20, LEASE_S)
    ledger.persist_dispatch(dispatch_row("deleg_r"), T0)

    counts = ledger.unit_counts()

    assert counts.rows == {("completed", "delivered"): 1_200, ("failed", "pending"): 1,
                           ("interrupted", "pending"): 1, ("running", "pending"): 1}
    assert counts.pruned == {} and counts.delivery_attempts == 1
    assert sum(counts.ever().values()) == 1_203


def test_units_pruned_stay_counted_so_counters_never_go_down(ledger_factory):
    ledger = ledger_factory()
    for i in range(5):
        settled(ledger, f"deleg_s{i}", T0 + 100 + i, how="delivered" if i % 2 else "dropped")
    terminal(ledger, "deleg_p")
    before = ledger.unit_counts().ever()

    assert ledger.prune(T0 + 200, retention_s=10_000, max_settled=1) == 4
    assert ledger.prune(T0 + 10**6, retention_s=0, max_settled=0) == 1

    counts = ledger_factory().unit_counts()  # another instance (process) reads the same tally
    assert counts.rows == {("completed", "pending"): 1}
    assert counts.pruned == {("completed", "delivered"): 2, ("completed", "dropped"): 3}
    assert counts.ever() == before


def test_prune_tallies_a_unit_the_stall_monitor_stopped_as_stalled(ledger_factory):
    """``/metrics`` counts a unit stopped by a stall (``stop_reason`` stall) as ``stalled``
    whatever state it finished in, so prune tallies it so and the count never moves (issue 42)."""
    ledger = ledger_factory()
    for delegation_id, status, reason in (("deleg_honoured", "interrupted", "stall"), ("deleg_given_up", "stalled", "stall"),
                                          ("deleg_user", "interrupted", "user"), ("deleg_done", "completed", None)):
        row = dispatch_row(delegation_id)
        ledger.persist_dispatch(row, T0)
        event = {**event_for(row, status, T0 + 100), "stop_reason": reason,
                 "summary": 'quoting "stop_reason": "stall" in a summary counts nothing'}
        ledger.persist_completion(row, event, {"status": status}, T0 + 100)
        ledger.mark_delivered(delegation_id, T0 + 100)

    assert ledger.prune(T0 + 10**6, retention_s=0, max_settled=0) == 4

    assert ledger_factory().unit_counts().pruned == {("stalled", "delivered"): 2, ("interrupted", "delivered"): 1,
                                                     ("completed", "delivered"): 1}


# -- instances and concurrency ------------------------------------------------------------------------
def test_a_second_instance_sees_what_the_first_wrote(ledger_factory):
    first, second = ledger_factory(), ledger_factory()
    terminal(first, "deleg_0001")
    assert second.claim_delivery("deleg_0001", "B", T0 + 100, LEASE_S) is True
    assert first.claim_delivery("deleg_0001", "A", T0 + 101, LEASE_S) is False
    first.close()
    assert ledger_factory().get("deleg_0001").delivery_claim == "B"


@pytest.mark.timeout(30)
def test_sixteen_instances_racing_for_one_row_yield_exactly_one_claim(ledger_factory):
    terminal(ledger_factory(), "deleg_race")
    contenders = 16
    instances = [ledger_factory() for _ in range(contenders)]
    barrier = threading.Barrier(contenders)
    outcomes: list[Any] = [None] * contenders

    def contend(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = instances[i].claim_delivery("deleg_race", f"consumer-{i}", T0 + 100, LEASE_S)
        except Exception as exc:  # a backend error is a failure of the contract, not a lost race
            outcomes[i] = exc

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count(True) == 1, outcomes
    assert outcomes.count(False) == contenders - 1, outcomes
    winner = outcomes.index(True)
    got = ledger_factory().get("deleg_race")
    assert (got.delivery_claim, got.delivery_attempts) == (f"consumer-{winner}", 1)


def test_settle_abandoned_keeps_an_acknowledged_row_acknowledged(ledger):
    # The terminal write failed (locked/full), the in-memory event was delivered and its ack
    # recorded on the still-running row, then the owner died. Recovery must settle the state
    # without re-opening delivery: the parent already has this result.
    ledger.persist_dispatch(dispatch_row(), T0)
    assert ledger.claim_delivery("deleg_0001", "A", T0 + 5, LEASE_S) is True
    assert ledger.complete_delivery("deleg_0001", "A", T0 + 6) is True

    assert ledger.settle_abandoned("deleg_0001", {"status": "unknown"}, {"status": "unknown"}, T0 + 100) is True

    got = ledger.get("deleg_0001")
    assert (got.state, got.delivery_state, got.delivered_at) == ("unknown", "delivered", T0 + 6)
    assert ledger.pending_rows() == []


# -- browsing the whole ledger (the dashboard's history) -------------------------------------------
def _browse_fixture(ledger) -> None:
    for n in range(7):
        row = dispatch_row(f"deleg_{n}", dispatched_at=T0 + n,
                           task={"goal": f"task {n}: {'survey the 100%_done logs' if n == 3 else 'count files'}",
                                 "model": "big-model" if n % 2 else "small-model"},
                           parent_session_id="sess-a" if n < 4 else "sess-b", owner_pid=100 + n % 2)
        ledger.persist_dispatch(row, T0 + n)
        if n != 6:
            state = "failed" if n in (1, 4) else "completed"
            ledger.persist_completion(row, event_for(row, state, T0 + 10 + n), {"status": state}, T0 + 10 + n)
    ledger.mark_delivered("deleg_0", T0 + 20)


def _ids(rows) -> list[str]:
    return [r.delegation_id for r in rows]


def test_browse_pages_newest_first_by_keyset(ledger):
    from offload.ledger.browse import Browse

    _browse_fixture(ledger)
    first = ledger.browse(Browse(limit=3))
    assert _ids(first) == ["deleg_6", "deleg_5", "deleg_4"]
    last = first[-1]
    second = ledger.browse(Browse(limit=3, before=(last.dispatched_at, last.delegation_id)))
    assert _ids(second) == ["deleg_3", "deleg_2", "deleg_1"]
    assert _ids(ledger.browse(Browse(limit=3, before=(T0 + 1, "deleg_1")))) == ["deleg_0"]


def test_browse_filters_by_state_delivery_session_owner_model_text_and_age(ledger):
    from offload.ledger.browse import Browse

    _browse_fixture(ledger)
    assert _ids(ledger.browse(Browse(states=("failed",)))) == ["deleg_4", "deleg_1"]
    assert _ids(ledger.browse(Browse(states=("failed", "running")))) == ["deleg_6", "deleg_4", "deleg_1"]
    assert _ids(ledger.browse(Browse(delivery_state="delivered"))) == ["deleg_0"]
    assert "deleg_6" not in _ids(ledger.browse(Browse(delivery_state="pending")))  # running: no delivery yet
    assert _ids(ledger.browse(Browse(session="sess-b"))) == ["deleg_6", "deleg_5", "deleg_4"]
    assert _ids(ledger.browse(Browse(owner="101"))) == ["deleg_5", "deleg_3", "deleg_1"]
    assert _ids(ledger.browse(Browse(model="big-model"))) == ["deleg_5", "deleg_3", "deleg_1"]
    assert _ids(ledger.browse(Browse(text="SURVEY"))) == ["deleg_3"]  # case-insensitive
    assert _ids(ledger.browse(Browse(text="100%_done"))) == ["deleg_3"]
    assert ledger.browse(Browse(text="100%x")) == [] and ledger.browse(Browse(text="1_0")) == []  # literal % and _
    assert _ids(ledger.browse(Browse(since=T0 + 5))) == ["deleg_6", "deleg_5"]


def test_finished_since_lists_the_timings_of_rows_finished_in_the_window(ledger):
    _browse_fixture(ledger)
    found = ledger.finished_since(T0 + 13)
    assert [(d - T0, c - T0, state) for d, c, _delivered, state in found] == [
        (3, 13, "completed"), (4, 14, "failed"), (5, 15, "completed")]
    assert ledger.finished_since(T0 + 10)[0][2] == T0 + 20  # deleg_0's delivery time


def test_browse_filters_by_the_owners_host_on_every_backend(ledger):
    from offload.ledger.browse import Browse
    from offload.ledger.protocol import local_host

    _browse_fixture(ledger)
    host = ledger.owner_host(ledger.get("deleg_0"))
    assert host == local_host()  # a single-host ledger's owners run here; a shared one stamps this host
    assert _ids(ledger.browse(Browse(owner=host))) == [f"deleg_{n}" for n in reversed(range(7))]
    assert ledger.browse(Browse(owner="another-host")) == []
    assert _ids(ledger.browse(Browse(owner="100", states=("completed",)))) == ["deleg_2", "deleg_0"]


def test_browse_keeps_the_rows_finished_since_a_time_newest_dispatched_first(ledger):
    from offload.ledger.browse import Browse

    _browse_fixture(ledger)  # deleg_n finished at T0 + 10 + n, but deleg_6 (running)
    assert _ids(ledger.browse(Browse(finished_since=T0 + 13))) == ["deleg_5", "deleg_4", "deleg_3"]
    assert _ids(ledger.browse(Browse(finished_since=T0 + 13, limit=2))) == ["deleg_5", "deleg_4"]
    assert _ids(ledger.browse(Browse(finished_since=T0 + 13, states=("failed",)))) == ["deleg_4"]
    assert ledger.browse(Browse(finished_since=T0 + 16)) == []
