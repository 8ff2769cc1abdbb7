"""The interim per-task failure notice: at most one per unit, never the result.

A batch unit whose child fails while siblings still run queues one early warning
(``task_failure_notice``); the unit's final event still follows, and only the final event is
stored, claimed, acknowledged and replayed.
"""
from __future__ import annotations

import threading

import pytest

from offload.engine.events import is_interim
from tests.engine.conftest import drain_queue, wait_event
from tools import async_delegation as ad
from tools.process_registry import process_registry
from tools.process_registry_notifications import format_process_notification

pytestmark = pytest.mark.timeout(30)


def failed(i: int) -> dict:
    return {"task_index": i, "status": "failed", "summary": None, "error": f"HTTP 400: no-such-model ({i})",
            "duration_seconds": 0.5, "live_transcript": f"/t/{i}.jsonl"}


def done(i: int) -> dict:
    return {"task_index": i, "status": "completed", "summary": f"ok {i}"}


def run_unit(entries: list[dict], goals: list[str], session_key: str = "s", **kw) -> str:
    """A batch unit whose runner records ``entries`` in order, then returns them all."""
    go = threading.Event()
    box: dict[str, str] = {}

    def runner() -> dict:
        go.wait(10)
        for entry in entries:
            ad.record_unit_child(box["did"], entry)
        return {"results": entries, "total_duration_seconds": 1.0}

    res = ad.dispatch_async_delegation_batch(goals=goals, context=None, toolsets=None, role="leaf", model="m",
                                             session_key=session_key, runner=runner, **kw)
    box["did"] = res["delegation_id"]
    go.set()
    return res["delegation_id"]


def test_first_failure_while_siblings_run_queues_one_notice_then_the_final_event():
    did = run_unit([failed(1), failed(0), done(2)], goals=["a", "b", "c"])  # a rejected model fails many
    final = wait_event(did)
    notice = wait_event(did, interim=True)
    assert drain_queue() == []  # exactly one notice, one final event
    assert is_interim(notice) and not is_interim(final)
    assert notice["status"] == "running" and notice["is_batch"] and notice["n_tasks"] == 3
    assert notice["results"] == [failed(1)] and notice["live_transcript"] == "/t/1.jsonl"
    assert notice["session_key"] == "s" and notice["goals"] == ["a", "b", "c"]
    assert final["status"] == "partial" and len(final["results"]) == 3
    assert format_process_notification(notice).startswith(f"[ASYNC DELEGATION TASK FAILED — {did}, task 2/3]")


def test_the_last_child_failing_queues_no_notice_the_result_is_due_anyway():
    did = run_unit([done(0), failed(1)], goals=["a", "b"])
    wait_event(did)
    assert drain_queue() == []


def test_a_unit_of_one_task_or_a_stopped_child_queues_no_notice():
    one = run_unit([failed(0)], goals=["only"])
    wait_event(one)
    stopped = run_unit([{"task_index": 0, "status": "interrupted"}, done(1)], goals=["a", "b"])
    wait_event(stopped)
    assert drain_queue() == []


def test_the_ledger_keeps_the_final_event_and_a_notice_never_claims_or_settles_the_row():
    did = run_unit([failed(0), done(1)], goals=["a", "b"])
    final = wait_event(did)
    notice = wait_event(did, interim=True)
    assert ad.claim_event_delivery(notice, "cli") == ""  # no claim: it has no row of its own
    assert ad.complete_event_delivery(notice, "") is False and ad.release_event_delivery(notice, "") == ""
    row = ad.get_durable_delegation(did)
    assert row["delivery_state"] == "pending" and not is_interim(row["event"])
    assert row["event"]["status"] == "partial" and len(row["event"]["results"]) == 2
    claim = ad.claim_event_delivery(final, "cli")
    assert claim and ad.complete_event_delivery(final, claim)
    assert ad.get_durable_delegation(did)["delivery_state"] == "delivered"


def test_a_replay_after_a_restart_offers_the_final_result_once_until_acknowledged(monkeypatch):
    did = run_unit([failed(0), done(1)], goals=["a", "b"])
    wait_event(did)
    drain_queue()  # the notice and the final event are lost with the process
    ad._reset_for_tests()
    monkeypatch.setattr(ad._delivery, "owner_alive", lambda pid, started: False)  # the owner is gone
    assert ad.restore_undelivered_completions(process_registry.completion_queue) == 1
    (replayed,) = drain_queue()
    assert not is_interim(replayed) and replayed["restored"] and len(replayed["results"]) == 2
    claim = ad.claim_event_delivery(replayed, "cli")
    assert claim and ad.complete_event_delivery(replayed, claim)
    ad._reset_for_tests()
    assert ad.restore_undelivered_completions(process_registry.completion_queue) == 0
