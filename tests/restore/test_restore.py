"""Restore after a restart: recovery of rows whose owner died, replay of pending rows, the
once-per-process restore of the completion bus, drain ownership, and error reporting.

Rows are seeded straight into the current ``$HERMES_HOME`` ledger as a previous process
would have left them; the owner of a "previous process" is a pid that has certainly exited.
"""
from __future__ import annotations

import logging
import os
import queue
import sqlite3
import subprocess
import sys
import time

import pytest

import tools.async_delegation as ad
import tools.async_delegation_delivery as delivery
from offload.ledger import LedgerError
from offload.engine.recovery import NO_RESULT_ERROR
from offload.engine.liveness import current_owner, owner_alive
from tools.process_registry import CompletionBus

pytestmark = pytest.mark.timeout(60)  # the seeder starts a subprocess to get a dead pid


def drain(q: queue.Queue) -> list[dict]:
    events = []
    while True:
        try:
            events.append(q.get_nowait())
        except queue.Empty:
            return events


def restore(now: float | None = None) -> list[dict]:
    q: queue.Queue = queue.Queue()
    count = delivery.restore_undelivered_completions(q, now=now)
    events = drain(q)
    assert count == len(events)
    return events


def stored(delegation_id: str) -> dict:
    row = ad.get_durable_delegation(delegation_id)
    assert row is not None, f"{delegation_id} is not in the ledger"
    return row


# -- recovery of rows whose owner died ---------------------------------------------------------------
def test_a_dead_owners_unit_keeps_its_finished_children_and_the_rest_turn_unknown(seed, caplog):
    first = {"task_index": 0, "status": "completed", "summary": "alpha done", "api_calls": 2}
    third = {"task_index": 2, "status": "error", "summary": None, "error": "tool crashed"}
    seed("deleg_unit", goals=["alpha", "beta", "gamma"], children=(first, third))

    with caplog.at_level(logging.WARNING, logger="offload.engine"):
        (evt,) = restore()

    assert (evt["delegation_id"], evt["type"], evt["status"]) == ("deleg_unit", "async_delegation", "unknown")
    assert evt["is_batch"] is True and evt["goals"] == ["alpha", "beta", "gamma"]
    by_index = {r["task_index"]: r for r in evt["results"]}
    assert by_index[0] == first and by_index[2] == third  # real results, untouched
    assert (by_index[1]["status"], by_index[1]["summary"]) == ("unknown", None)
    assert "2/3 child results were recorded" in evt["error"]
    assert (evt["summary"], evt["last_known_status"]) == (None, "running")
    assert (evt["session_key"], evt["origin_ui_session_id"], evt["parent_session_id"]) == (
        "agent:main:telegram:dm:42", "ui-1", "parent-1")
    assert any("deleg_unit" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)

    row = stored("deleg_unit")
    assert (row["state"], row["delivery_state"]) == ("unknown", "pending")
    assert row["result"]["results"] == evt["results"]


def test_a_dead_owners_unit_of_one_group_counts_only_its_own_tasks(seed):
    seed("deleg_group", goals=["a", "b", "c", "d"], task_extra={"task_indexes": [1, 3], "group": "g"},
         children=({"task_index": 3, "status": "completed", "summary": "d done"},))

    (evt,) = restore()

    assert [r["task_index"] for r in evt["results"]] == [1, 3]
    assert [r["status"] for r in evt["results"]] == ["unknown", "completed"]
    assert "1/2 child results were recorded" in evt["error"]
    assert evt["group"] == "g"


def test_a_dead_owners_row_without_partial_results_has_outcome_unknown(seed):
    seed("deleg_single")

    (evt,) = restore()

    assert evt["status"] == "unknown"
    assert evt["error"] == NO_RESULT_ERROR
    assert "outcome unknown" in evt["error"]
    assert "results" not in evt
    assert stored("deleg_single")["result"] == {"status": "unknown", "error": NO_RESULT_ERROR}


def test_recovery_reports_transcript_tails(seed, tmp_path):
    transcript = tmp_path / "child-0.log"
    transcript.write_text("".join(f"line {i}\n" for i in range(30)))
    seed("deleg_tails", goals=["a"], task_extra={"task_transcripts": {"0": str(transcript)}})

    (evt,) = restore()

    assert evt["task_transcripts"] == {"0": str(transcript)}
    assert evt["transcript_tails"]["0"].splitlines() == [f"line {i}" for i in range(10, 30)]


def test_a_recovered_event_keeps_the_subagent_model_stamped_at_dispatch(seed):
    stamp = {"model": "upstage/solar-pro-4", "provider": "openrouter", "has_fallback": False}
    seed("deleg_stamped", goals=["a"], task_extra={"subagent_config": stamp})

    (evt,) = restore()

    assert evt["subagent_config"] == stamp


def test_a_recovered_event_routes_like_a_completion_event(seed):
    routing = {"scope_id": "thread-7", "user_id": "u42", "user_name": "Ada", "group": "g1", "task_indexes": [0]}
    seed("deleg_routed", goals=["a"], task_extra=routing, session_key="agent:main:telegram:dm:42")

    (evt,) = restore()

    assert {k: evt.get(k) for k in routing} == routing
    assert (evt["type"], evt["status"], evt["delegation_id"], evt["session_key"]) == (
        "async_delegation", "unknown", "deleg_routed", "agent:main:telegram:dm:42")
    assert evt["origin_ui_session_id"] == "ui-1" and evt["completed_at"] >= evt["dispatched_at"]


def test_a_reused_pid_counts_as_dead(seed):
    pid, started = current_owner()
    assert started is not None, "this platform cannot fingerprint processes"
    seed("deleg_reused", owner_pid=pid, owner_started_at=started + 12345)  # our pid, someone else's start

    assert owner_alive(pid, started + 12345) is False
    assert ad.recover_abandoned_delegations() == 1
    assert stored("deleg_reused")["state"] == "unknown"


def test_this_processs_own_rows_are_neither_recovered_nor_replayed(seed):
    pid, started = current_owner()
    seed("deleg_live_running", owner_pid=pid, owner_started_at=started)
    seed("deleg_live_done", owner_pid=pid, owner_started_at=started, completed_at=time.time() - 5)

    assert ad.recover_abandoned_delegations() == 0
    assert restore() == []  # its events are on this process's own bus already
    assert (stored("deleg_live_running")["state"], stored("deleg_live_running")["delivery_state"]) == (
        "running", "pending")
    assert (stored("deleg_live_done")["state"], stored("deleg_live_done")["delivery_state"]) == (
        "completed", "pending")


def test_a_finished_row_of_another_live_process_is_replayed_here(seed):
    """Ownership says who runs a unit, not who delivers it: an owner that is alive but consumes
    nothing (an ``offload worker``, a program that never drains its bus) would otherwise keep
    the result from every live consumer of its session (issue 27)."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        seed("deleg_other_running", owner_pid=other.pid)
        seed("deleg_other_done", owner_pid=other.pid, completed_at=time.time() - 5)

        assert ad.recover_abandoned_delegations() == 0  # alive: still running there
        assert [evt["delegation_id"] for evt in restore()] == ["deleg_other_done"]
    finally:
        other.kill()
        other.wait()


def test_a_unit_acknowledged_in_memory_is_not_replayed_after_its_owner_died(seed):
    # Its terminal write failed, the in-memory event was claimed and acknowledged on the
    # still-running row, then the process exited: the parent already has the result.
    seed("deleg_acked_running")
    claim = "gateway:1:abc"
    assert ad.claim_completion_delivery("deleg_acked_running", claim) is True
    assert ad.complete_completion_delivery("deleg_acked_running", claim) is True

    assert restore() == []

    row = stored("deleg_acked_running")
    assert (row["state"], row["delivery_state"]) == ("unknown", "delivered")


def test_recovery_settles_each_row_once(seed):
    seed("deleg_once")
    assert ad.recover_abandoned_delegations() == 1
    assert ad.recover_abandoned_delegations() == 0


# -- replay ----------------------------------------------------------------------------------------------
def test_replayed_events_are_stamped_restored_in_memory_only(seed):
    seed("deleg_done", completed_at=time.time() - 30)

    (evt,) = restore()

    stored_event = stored("deleg_done")["event"]
    assert evt["restored"] is True
    assert "restored" not in stored_event
    assert {k: v for k, v in evt.items() if k != "restored"} == stored_event


def test_replay_offers_pending_rows_oldest_first(seed):
    now = time.time()
    seed("deleg_b", completed_at=now - 20)
    seed("deleg_c", completed_at=now - 10)
    seed("deleg_a", completed_at=now - 30)

    assert [e["delegation_id"] for e in restore(now)] == ["deleg_a", "deleg_b", "deleg_c"]


def test_rows_older_than_the_replay_cap_are_dropped_but_stay_queryable(seed, caplog):
    now = time.time()
    cap = ad._MAX_COMPLETION_REPLAY_AGE_S
    seed("deleg_ancient", completed_at=now - cap - 60, dispatched_at=now - cap - 120)
    seed("deleg_recent", completed_at=now - cap + 60, dispatched_at=now - cap)

    with caplog.at_level(logging.WARNING, logger="offload.engine"):
        events = restore(now)

    assert [e["delegation_id"] for e in events] == ["deleg_recent"]
    ancient = stored("deleg_ancient")
    assert ancient["delivery_state"] == "dropped"
    assert (ancient["state"], ancient["event"]["summary"]) == ("completed", "summary of deleg_ancient")
    assert any("deleg_ancient" in r.getMessage() and "cap" in r.getMessage() for r in caplog.records)
    assert restore(now) == [{**ad.get_durable_delegation("deleg_recent")["event"], "restored": True}]


def test_rows_over_the_attempt_budget_are_dropped_but_stay_queryable(seed):
    now = time.time()
    seed("deleg_tired", completed_at=now - 600)
    seed("deleg_fresh", completed_at=now - 500)
    ledger = delivery.current_ledger()
    for attempt in range(ad._MAX_DELIVERY_ATTEMPTS):  # each claim takes over the expired one
        assert ledger.claim_delivery("deleg_tired", f"c{attempt}", now - 400 + attempt, lease_s=0) is True

    events = restore(now)

    assert [e["delegation_id"] for e in events] == ["deleg_fresh"]
    tired = stored("deleg_tired")
    assert (tired["delivery_state"], tired["delivery_attempts"]) == ("dropped", ad._MAX_DELIVERY_ATTEMPTS)
    assert tired["result"] == {"status": "completed", "summary": "summary of deleg_tired"}


def test_restore_without_a_state_db_returns_zero_and_creates_nothing(_isolated_hermes_home):
    q: queue.Queue = queue.Queue()

    assert ad.restore_undelivered_completions(q) == 0
    assert ad.recover_abandoned_delegations() == 0
    assert ad.get_durable_delegation("deleg_x") is None
    assert q.empty()
    assert list(_isolated_hermes_home.iterdir()) == []


def test_restore_into_a_removed_home_does_not_resurrect_it(tmp_path, monkeypatch):
    gone = tmp_path / "profiles" / "removed"
    monkeypatch.setenv("HERMES_HOME", str(gone))

    assert ad.restore_undelivered_completions(queue.Queue()) == 0
    assert not (tmp_path / "profiles").exists()


def test_an_acknowledged_row_is_not_restored_again(seed):
    seed("deleg_ack", completed_at=time.time() - 5)
    (evt,) = restore()

    assert ad.mark_completion_delivered(evt["delegation_id"]) is True

    assert restore() == []
    assert stored("deleg_ack")["delivery_state"] == "delivered"
    assert ad.mark_completion_delivered("deleg_ack") is False


def test_a_recovered_row_is_replayed_until_acknowledged(seed):
    seed("deleg_dead")
    (first,) = restore()
    (again,) = restore()  # not acknowledged: still owed to the parent
    assert first == again

    claim = ad.claim_event_delivery(again, "cli")
    assert claim and ad.complete_event_delivery(again, claim) is True
    assert restore() == []


# -- claim facade ----------------------------------------------------------------------------------------
def test_claim_event_delivery_needs_no_token_for_events_without_a_durable_row(seed):
    assert ad.claim_event_delivery({"type": "completion", "session_id": "p1"}, "cli") == ""
    assert ad.claim_event_delivery({"type": "async_delegation"}, "cli") == ""
    assert ad.claim_event_delivery({"type": "async_delegation", "delegation_id": "d",
                                    "task_failure_notice": True}, "cli") == ""


def test_claim_event_delivery_is_exclusive_and_names_the_consumer(seed):
    seed("deleg_c", completed_at=time.time() - 5)
    (evt,) = restore()

    first = ad.claim_event_delivery(evt, "gateway")
    second = ad.claim_event_delivery(evt, "cli")

    assert first.startswith(f"gateway:{os.getpid()}:") and second is None
    assert ad.release_event_delivery(evt, first) == "pending"
    third = ad.claim_event_delivery(evt, "cli")
    assert third is not None
    assert ad.complete_event_delivery(evt, first) is False
    assert ad.complete_event_delivery(evt, third) is True
    assert stored("deleg_c")["delivery_attempts"] == 2


def test_claim_of_an_event_without_a_row_is_granted(seed):
    seed("deleg_other", completed_at=time.time())
    assert ad.claim_completion_delivery("deleg_legacy", "cli:1:x") is True


# -- the completion bus ----------------------------------------------------------------------------------
def test_process_registry_restores_once_per_process(seed):
    seed("deleg_bus", completed_at=time.time() - 5)
    registry = CompletionBus()

    assert registry.restore_completions() == 1
    assert registry.restore_completions() == 0

    (evt,) = drain(registry.completion_queue)
    assert (evt["delegation_id"], evt["restored"]) == ("deleg_bus", True)


def test_a_registry_built_without_init_still_restores(seed):
    seed("deleg_bare", completed_at=time.time() - 5)
    registry = CompletionBus.__new__(CompletionBus)
    registry.completion_queue = queue.Queue()

    assert registry.restore_completions() == 1
    assert registry.restore_completions() == 0


def test_a_failed_restore_is_logged_and_not_retried(monkeypatch, caplog):
    calls = []

    def broken(q):
        calls.append(q)
        raise LedgerError("state.db is not a readable SQLite database", kind="corrupt")

    monkeypatch.setattr(delivery, "restore_undelivered_completions", broken)
    registry = CompletionBus()

    with caplog.at_level(logging.ERROR):
        assert registry.restore_completions() == 0
        assert registry.restore_completions() == 0

    assert len(calls) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "Could not restore async delegation completions"]


def _events():
    return {
        "restored": {"type": "async_delegation", "delegation_id": "d_restored", "session_key": "s1", "restored": True},
        "fresh": {"type": "async_delegation", "delegation_id": "d_fresh", "session_key": "s1"},
        "other": {"type": "async_delegation", "delegation_id": "d_other", "session_key": "s2"},
        "process": {"type": "completion", "session_id": "proc_1"},
        "routed_process": {"type": "completion", "session_id": "proc_2", "origin_ui_session_id": "ui-9"},
    }


def _bus(*names: str) -> tuple[CompletionBus, dict]:
    registry = CompletionBus()
    registry._completions_restored = True  # nothing durable here: only the in-memory rules
    events = _events()
    for name in names:
        registry.completion_queue.put(events[name])
    return registry, events


def _taken(drained) -> list[str]:
    return [evt.get("delegation_id") or evt["session_id"] for evt, _text in drained]


def _left(registry: CompletionBus) -> list[str]:
    return [evt.get("delegation_id") or evt["session_id"] for evt in drain(registry.completion_queue)]


def test_an_unfiltered_drain_takes_everything_but_restored_async_events(notifications_stub):
    registry, _ = _bus("restored", "fresh", "process", "other", "routed_process")

    drained = registry.drain_notifications()

    assert _taken(drained) == ["d_fresh", "proc_1", "d_other", "proc_2"]
    assert [text for _evt, text in drained][0] == "[async_delegation] d_fresh"
    assert _left(registry) == ["d_restored"]


def test_a_session_key_drain_takes_only_that_sessions_events(notifications_stub):
    registry, _ = _bus("restored", "fresh", "other", "process", "routed_process")

    assert _taken(registry.drain_notifications(session_key="s1")) == ["d_restored", "d_fresh", "proc_1"]
    assert _left(registry) == ["d_other", "proc_2"]  # unowned events go back, in order


def test_an_owns_event_predicate_decides_alone(notifications_stub):
    registry, _ = _bus("restored", "fresh", "other", "process", "routed_process")

    drained = registry.drain_notifications(session_key="s1",
                                           owns_event=lambda e: e.get("delegation_id") in ("d_restored", "d_other"))

    assert _taken(drained) == ["d_restored", "d_other", "proc_1"]
    assert _left(registry) == ["d_fresh", "proc_2"]


def test_a_raising_predicate_owns_nothing_that_needs_proof(notifications_stub):
    registry, _ = _bus("restored", "fresh", "process", "routed_process")

    def broken(evt):
        raise RuntimeError("session store unavailable")

    assert _taken(registry.drain_notifications(owns_event=broken)) == ["proc_1"]
    assert _left(registry) == ["d_restored", "d_fresh", "proc_2"]


def test_the_first_drain_restores_and_the_restored_event_waits_for_its_owner(seed, notifications_stub):
    seed("deleg_prev", completed_at=time.time() - 5, session_key="s-prev")
    registry = CompletionBus()

    assert registry.drain_notifications() == []  # restored, but an unfiltered drain may not adopt it
    assert registry.drain_notifications(session_key="s-new") == []
    drained = registry.drain_notifications(session_key="s-prev")

    assert _taken(drained) == ["deleg_prev"]
    assert drained[0][0]["restored"] is True


@pytest.mark.timeout(60)
def test_building_a_runtime_or_importing_the_adapter_never_touches_the_ledger(tmp_path, run_python):
    home = tmp_path / "empty-home"
    home.mkdir()

    run_python("import offload; offload.Offload().close(); import tools.async_delegation, tools.process_registry",
               home)

    assert list(home.iterdir()) == []


# -- error reporting -------------------------------------------------------------------------------------
def _corrupt_state_db() -> None:
    path = delivery.current_ledger().path
    tmp = path.with_name("garbage.tmp")
    tmp.write_bytes(b"\x13not a database\x00" * 400)
    os.replace(tmp, path)


def _healthy_state_db() -> None:
    path = delivery.current_ledger().path
    tmp = path.with_name("fresh.tmp")
    sqlite3.connect(tmp).close()
    os.replace(tmp, path)


def _errors(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and r.name == "offload.engine"]


@pytest.mark.sqlite_only
def test_consecutive_failures_of_one_kind_log_one_error(caplog):
    _corrupt_state_db()

    with caplog.at_level(logging.DEBUG, logger="offload.engine"):
        assert ad.claim_completion_delivery("deleg_x", "cli:1:a") is True  # delivery goes on in memory
        assert ad.complete_completion_delivery("deleg_x", "cli:1:a") is False
        assert ad.mark_completion_delivered("deleg_x") is False

    (error,) = _errors(caplog)
    assert "mv" in error.getMessage()  # the fix travels with the one line that is logged
    assert str(delivery.current_ledger().path) in error.getMessage()


@pytest.mark.sqlite_only
def test_a_success_in_between_re_arms_error_reporting(caplog):
    with caplog.at_level(logging.DEBUG, logger="offload.engine"):
        _corrupt_state_db()
        ad.claim_completion_delivery("deleg_x", "cli:1:a")
        ad.claim_completion_delivery("deleg_x", "cli:1:b")
        assert len(_errors(caplog)) == 1

        _healthy_state_db()
        assert ad.claim_completion_delivery("deleg_x", "cli:1:c") is True  # no row: nothing to guard

        _corrupt_state_db()
        ad.claim_completion_delivery("deleg_x", "cli:1:d")
        ad.claim_completion_delivery("deleg_x", "cli:1:e")

    assert len(_errors(caplog)) == 2


def test_each_kind_is_reported_once(caplog):
    ledger = delivery.current_ledger()
    with caplog.at_level(logging.DEBUG, logger="offload.engine"):
        for _ in range(2):
            delivery.report_ledger_error(ledger, "claim", LedgerError("locked", kind="locked"), "")
            delivery.report_ledger_error(ledger, "claim", LedgerError("full", kind="full"), "")
        delivery.note_ledger_ok(ledger)
        delivery.report_ledger_error(ledger, "claim", LedgerError("locked", kind="locked"), "")

    assert [r.args[1].kind for r in _errors(caplog)] == ["locked", "full", "locked"]
