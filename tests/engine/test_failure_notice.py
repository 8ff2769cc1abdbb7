"""The interim per-task failure notice: at most one per unit, never the result.

A batch unit whose child fails while siblings still run queues one early warning
(``task_failure_notice``); the unit's final event still follows, and only the final event is
stored, claimed, acknowledged and replayed.
"""
from __future__ import annotations

import threading

import pytest

from offload import Hooks, Offload
from offload.engine.events import is_interim
from tests.engine.conftest import drain_queue
from tests.runtime_support import hermes_batch, wait

pytestmark = pytest.mark.timeout(30)


def failed(i: int) -> dict:
    return {"task_index": i, "status": "failed", "summary": None, "error": f"HTTP 400: no-such-model ({i})",
            "duration_seconds": 0.5, "live_transcript": f"/t/{i}.jsonl"}


def done(i: int) -> dict:
    return {"task_index": i, "status": "completed", "summary": f"ok {i}"}


def run_unit(off: Offload, entries: list[dict], goals: list[str], session_key: str = "s", **kw) -> str:
    """A batch unit whose runner records ``entries`` in order, then returns them all."""
    go = threading.Event()
    box: dict[str, str] = {}

    def runner() -> dict:
        go.wait(10)
        for entry in entries:
            off.engine.record_unit_child(box["did"], entry)
        return {"results": entries, "total_duration_seconds": 1.0}

    res = hermes_batch(off, goals=goals, context=None, toolsets=None, role="leaf", model="m",
                                             session_key=session_key, runner=runner, **kw)
    box["did"] = res["delegation_id"]
    go.set()
    return res["delegation_id"]


def test_first_failure_while_siblings_run_queues_one_notice_then_the_final_event(runtime):
    did = run_unit(runtime, [failed(1), failed(0), done(2)], goals=["a", "b", "c"])  # a rejected model fails many
    final = wait(runtime, did)
    notice = wait(runtime, did, interim=True)
    assert drain_queue(runtime.bus) == []  # exactly one notice, one final event
    assert is_interim(notice) and not is_interim(final)
    assert notice["status"] == "running" and notice["is_batch"] and notice["n_tasks"] == 3
    assert notice["results"] == [failed(1)] and notice["live_transcript"] == "/t/1.jsonl"
    assert notice["session_key"] == "s" and notice["goals"] == ["a", "b", "c"]
    assert final["status"] == "partial" and len(final["results"]) == 3
    assert runtime.render(notice).startswith(f"[ASYNC DELEGATION TASK FAILED — {did}, task 2/3]")


def test_the_last_child_failing_queues_no_notice_the_result_is_due_anyway(runtime):
    did = run_unit(runtime, [done(0), failed(1)], goals=["a", "b"])
    wait(runtime, did)
    assert drain_queue(runtime.bus) == []


def test_a_unit_of_one_task_or_a_stopped_child_queues_no_notice(runtime):
    one = run_unit(runtime, [failed(0)], goals=["only"])
    wait(runtime, one)
    stopped = run_unit(runtime, [{"task_index": 0, "status": "interrupted"}, done(1)], goals=["a", "b"])
    wait(runtime, stopped)
    assert drain_queue(runtime.bus) == []


def test_the_ledger_keeps_the_final_event_and_a_notice_never_claims_or_settles_the_row(runtime):
    did = run_unit(runtime, [failed(0), done(1)], goals=["a", "b"])
    final = wait(runtime, did)
    notice = wait(runtime, did, interim=True)
    assert runtime.deliveries.claim_event(notice, "cli") == ""  # no claim: it has no row of its own
    assert runtime.deliveries.complete_event(notice, "") is False and runtime.deliveries.release_event(notice, "") == ""
    row = runtime.deliveries.get(did)
    assert row["delivery_state"] == "pending" and not is_interim(row["event"])
    assert row["event"]["status"] == "partial" and len(row["event"]["results"]) == 2
    claim = runtime.deliveries.claim_event(final, "cli")
    assert claim and runtime.deliveries.complete_event(final, claim)
    assert runtime.deliveries.get(did)["delivery_state"] == "delivered"


def test_a_replay_after_a_restart_offers_the_final_result_once_until_acknowledged(runtime):
    did = run_unit(runtime, [failed(0), done(1)], goals=["a", "b"])
    wait(runtime, did)
    drain_queue(runtime.bus)  # the notice and the final event are lost with the process

    def later_process() -> Offload:  # a runtime of a later process on the same home: the owner is gone
        return Offload(home=runtime.home, hooks=Hooks(owner_alive=lambda pid, started: False))
    with later_process() as later:
        assert later.bus.restore_completions() == 1
        (replayed,) = drain_queue(later.bus)
        assert not is_interim(replayed) and replayed["restored"] and len(replayed["results"]) == 2
        claim = later.deliveries.claim_event(replayed, "cli")
        assert claim and later.deliveries.complete_event(replayed, claim)
    with later_process() as again:
        assert again.bus.restore_completions() == 0
