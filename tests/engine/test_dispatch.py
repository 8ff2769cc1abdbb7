"""Dispatch, capacity, the worker and finalize."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from offload.engine.engine import new_delegation_id
from tests.engine.conftest import drain_queue
from tests.runtime_support import hermes_batch, hermes_dispatch, wait

pytestmark = pytest.mark.timeout(30)


def dispatch(off, runner, **kw):
    args = dict(goal="g", context=None, toolsets=None, role="leaf", model="m", session_key="", runner=runner)
    args.update(kw)
    return hermes_dispatch(off, **args)


def batch(off, runner, **kw):
    args = dict(goals=["a", "b"], context=None, toolsets=None, role="leaf", model="m", session_key="", runner=runner)
    args.update(kw)
    return hermes_batch(off, **args)



@pytest.mark.parametrize("runner", [None, "not callable", 42])
def test_non_callable_runner_is_rejected_with_a_clear_error(runtime, runner):
    res = dispatch(runtime, runner)
    assert res["status"] == "rejected"
    assert "runner must be a zero-argument callable" in res["error"]
    assert runtime.engine.active_count() == 0


@pytest.mark.parametrize("cap", [0, -1, "3", 2.5, True, None])
def test_cap_below_one_or_not_an_integer_is_rejected(runtime, cap):
    res = dispatch(runtime, lambda: {}, max_async_children=cap)
    assert res["status"] == "rejected"
    assert "max_async_children must be an integer of at least 1" in res["error"]


def test_duplicate_delegation_id_is_rejected(runtime):
    gate = threading.Event()
    first = batch(runtime, lambda: (gate.wait(10), {"results": []})[1], delegation_id="deleg_same")
    second = batch(runtime, lambda: {"results": []}, delegation_id="deleg_same")
    gate.set()
    assert first["status"] == "dispatched"
    assert second["status"] == "rejected" and "already in use" in second["error"]


def test_runner_that_raises_becomes_an_error_event_and_the_worker_survives(runtime):
    def boom():
        raise RuntimeError("child exploded")

    evt = wait(runtime, dispatch(runtime, boom)["delegation_id"])
    assert evt["status"] == "error"
    assert evt["error"] == "RuntimeError: child exploded"
    again = wait(runtime, dispatch(runtime, lambda: {"status": "completed", "summary": "ok"})["delegation_id"])
    assert again["summary"] == "ok"


def test_runner_returning_a_non_dict_is_an_error_not_a_crash(runtime):
    evt = wait(runtime, dispatch(runtime, lambda: "just text")["delegation_id"])
    assert evt["status"] == "error"
    assert "expected a result dict" in evt["error"]


@pytest.mark.parametrize("results,error,expected", [
    ([{"task_index": 0, "status": "completed"}, {"task_index": 1, "status": "completed"}], None, "completed"),
    ([{"task_index": 0, "status": "completed"}, {"task_index": 1, "status": "failed"}], None, "partial"),
    ([{"task_index": 0, "status": "completed"}, {"task_index": 1, "status": "interrupted"}], None, "partial"),
    ([{"task_index": 0, "status": "interrupted"}, {"task_index": 1, "status": "interrupted"}], None, "interrupted"),
    ([{"task_index": 0, "status": "interrupted"}, {"task_index": 1, "status": "error"}], None, "failed"),
    ([{"task_index": 0, "status": "error"}, {"task_index": 1, "status": "error"}], None, "error"),
    ([{"task_index": 0, "status": "failed"}], None, "failed"),
    ([], "RuntimeError: x", "error"),
    ([], None, "unknown"),
])
def test_a_unit_is_completed_only_when_every_child_completed(runtime, results, error, expected):
    evt = wait(runtime, batch(runtime, lambda: {"results": results, "error": error})["delegation_id"])
    assert evt["status"] == expected
    assert evt["is_batch"] is True and evt["goals"] == ["a", "b"]


def test_batch_label_names_the_unit_goals(runtime):
    gate = threading.Event()
    one = batch(runtime, lambda: (gate.wait(10), {"results": []})[1], goals=["x", "only this"], task_indexes=[1])
    many = batch(runtime, lambda: (gate.wait(10), {"results": []})[1], goals=["first goal", "second goal"])
    labels = {d["delegation_id"]: d["goal"] for d in runtime.engine.list()}
    gate.set()
    assert labels[one["delegation_id"]] == "only this"
    assert labels[many["delegation_id"]] == "2 parallel subagents: first goal; second goal"


def test_a_batch_label_cuts_a_long_goal_at_a_word_with_an_ellipsis():
    from offload.engine.units import batch_label

    label = batch_label(["Summarise the failing integration tests and their logs", "b"])
    assert label == "2 parallel subagents: Summarise the failing integration tests…; b"


def test_finalizing_frees_the_slot_and_units_of_one_call_share_it(runtime):
    gate = threading.Event()
    blocked = lambda: (gate.wait(10), {"results": []})[1]  # noqa: E731
    a = batch(runtime, blocked, delegation_id="deleg_c-1", max_async_children=1)
    b = batch(runtime, blocked, delegation_id="deleg_c-2", slot_key="deleg_c-1", max_async_children=1)
    other = batch(runtime, blocked, max_async_children=1)
    assert [a["status"], b["status"], other["status"]] == ["dispatched", "dispatched", "rejected"]
    assert "max_concurrent_children" in other["error"]
    gate.set()
    wait(runtime, "deleg_c-1")
    wait(runtime, "deleg_c-2")
    assert batch(runtime, lambda: {"results": []}, max_async_children=1)["status"] == "dispatched"


def test_pool_is_sized_by_live_units_so_no_unit_waits_behind_a_full_pool(runtime):
    started = [threading.Event() for _ in range(4)]
    release = threading.Event()

    def runner(i):
        return lambda: (started[i].set(), release.wait(10), {"results": []})[2]

    for i in range(4):
        batch(runtime, runner(i), delegation_id=f"deleg_u-{i}", slot_key="deleg_u-0", max_async_children=1)
    try:
        assert all(e.wait(5) for e in started)
    finally:
        release.set()


def test_finalize_runs_exactly_once(runtime):
    gate = threading.Event()
    res = dispatch(runtime, lambda: (gate.wait(10), {"status": "completed", "summary": "late"})[1])
    did = res["delegation_id"]
    assert runtime.engine.finalize(did, {"status": "interrupted", "summary": "first"}, "interrupted") is True
    assert runtime.engine.finalize(did, {"status": "completed"}, "completed") is False
    gate.set()
    assert wait(runtime, did)["summary"] == "first"
    with pytest.raises(Exception):
        wait(runtime, did, timeout_s=0.3)  # the late runner return queued nothing


def test_active_and_task_counts(runtime):
    gate = threading.Event()
    blocked = lambda: (gate.wait(10), {"results": []})[1]  # noqa: E731
    batch(runtime, blocked, goals=["a", "b", "c"])
    batch(runtime, blocked, goals=["a", "b", "c"], task_indexes=[2])
    dispatch(runtime, lambda: (gate.wait(10), {})[1])
    assert runtime.engine.active_count() == 3
    assert runtime.engine.active_task_count() == 3 + 1 + 1
    gate.set()


def test_prune_keeps_the_newest_terminal_records_and_every_live_one(runtime, monkeypatch):
    monkeypatch.setattr(runtime, "policy", dataclasses.replace(runtime.policy, max_retained_completed=3))
    ids = [dispatch(runtime, lambda: {"status": "completed"})["delegation_id"] for _ in range(6)]
    for did in ids:
        wait(runtime, did)
    gate = threading.Event()
    live = dispatch(runtime, lambda: (gate.wait(10), {})[1])["delegation_id"]
    last = dispatch(runtime, lambda: {"status": "completed"})["delegation_id"]
    wait(runtime, last)
    with runtime.engine.lock:
        kept = set(runtime.engine.records)
    gate.set()
    assert live in kept
    assert len(kept - {live}) == 3 and last in kept


def test_event_carries_routing_origin_and_no_private_keys(runtime):
    res = dispatch(runtime, lambda: {"status": "completed", "summary": "s", "api_calls": 2},
                   session_key="agent:main:telegram:dm:1", parent_session_id="p1",
                   origin={"user_id": "u7", "scope_id": "", "user_name": "Ann"})
    evt = wait(runtime, res["delegation_id"])
    assert evt["user_id"] == "u7" and evt["user_name"] == "Ann" and "scope_id" not in evt
    assert evt["parent_session_id"] == "p1" and evt["api_calls"] == 2
    assert not any(k.startswith("_") for k in evt)
    assert evt["duration_seconds"] is not None


def test_interrupt_all_counts_only_successful_signals(runtime):
    gate = threading.Event()

    def bad_interrupt():
        raise RuntimeError("cannot stop")

    dispatch(runtime, lambda: (gate.wait(10), {"status": "interrupted"})[1], interrupt_fn=gate.set)
    dispatch(runtime, lambda: (gate.wait(10), {"status": "interrupted"})[1], interrupt_fn=bad_interrupt)
    dispatch(runtime, lambda: (gate.wait(10), {"status": "interrupted"})[1])
    assert runtime.engine.interrupt(lambda r: True, "test") == 1


def test_interrupt_for_session_touches_only_that_session(runtime):
    gates = {"a": threading.Event(), "b": threading.Event()}
    for key, gate in gates.items():
        dispatch(runtime, lambda g=gate: (g.wait(10), {"status": "interrupted"})[1], interrupt_fn=gate.set,
                 session_key=key)
    assert runtime.engine.interrupt_session(session_key="a") == 1
    assert gates["a"].is_set() and not gates["b"].is_set()
    assert runtime.engine.has_live_for_session(session_key="b")
    gates["b"].set()


def test_listing_hides_callables_and_survives_a_raising_sampler(runtime):
    gate = threading.Event()

    def sampler():
        raise RuntimeError("unreadable")

    res = dispatch(runtime, lambda: (gate.wait(10), {})[1], progress_fn=sampler, interrupt_fn=gate.set)
    (item,) = [d for d in runtime.engine.list() if d["delegation_id"] == res["delegation_id"]]
    gate.set()
    assert "progress_fn" not in item and "interrupt_fn" not in item
    assert not any(k.startswith("_") for k in item)
    assert "children_activity" not in item and "seconds_since_progress" in item


def test_a_sampler_may_call_back_into_the_engine_while_it_lists(runtime):
    gate, listed = threading.Event(), []
    res = dispatch(runtime, lambda: (gate.wait(10), {})[1], progress_fn=lambda: (runtime.engine.active_count(), False))
    lister = threading.Thread(target=lambda: listed.extend(runtime.engine.list()), daemon=True)
    lister.start()
    lister.join(5)  # sampled under the engine lock, the sampler would deadlock here
    gate.set()
    assert not lister.is_alive(), "the listing called a sampler while holding the engine lock"
    (item,) = [d for d in listed if d["delegation_id"] == res["delegation_id"]]
    assert item["in_tool"] is False


def test_children_activity_tolerates_foreign_token_shapes(runtime):
    gate = threading.Event()
    res = dispatch(runtime, lambda: (gate.wait(10), {})[1],
                   progress_fn=lambda: (((2, "terminal", 0.0), "junk", None), True))
    (item,) = [d for d in runtime.engine.list() if d["delegation_id"] == res["delegation_id"]]
    gate.set()
    first, second, third = item["children_activity"]
    assert first["api_calls"] == 2 and first["current_tool"] == "terminal"
    assert second is None and third is None


def test_record_unit_child_keeps_partial_results_for_the_stall_result(runtime, monkeypatch):
    gate = threading.Event()
    res = batch(runtime, lambda: (gate.wait(10), {"results": []})[1], goals=["a", "b"])
    did = res["delegation_id"]
    assert runtime.engine.record_unit_child(did, {"task_index": 0, "status": "completed", "summary": "kept"}) is True
    with runtime.engine.lock:
        runtime.engine.records[did].update(status="stalling", _interrupted_at=0.0, _stall_quiet_seconds=5.0,
                                 _stall_threshold_seconds=1.0)
    runtime.engine.stalls.check(10**9)  # far past any grace window: forced stalled finalize
    evt = wait(runtime, did)
    gate.set()
    by_index = {r["task_index"]: r for r in evt["results"]}
    assert evt["status"] == "stalled"
    assert by_index[0]["summary"] == "kept" and by_index[1]["status"] == "stalled"
    assert runtime.engine.record_unit_child(did, {"task_index": 1}) is False  # terminal: nothing more recorded


def test_no_stray_events_after_each_test(runtime):
    assert drain_queue(runtime.bus) == []


def test_a_held_slot_outlives_a_unit_that_finishes_at_once(runtime):
    """The first unit of a call may finish before its siblings are dispatched; the call's slot
    must stay taken until the caller releases it, or a sibling could be refused at capacity."""
    first = batch(runtime, lambda: {"results": []}, delegation_id="deleg_h-1", max_async_children=1, hold_slot=True)
    wait(runtime, first["delegation_id"])
    gate = threading.Event()
    sibling = batch(runtime, lambda: (gate.wait(10), {"results": []})[1], delegation_id="deleg_h-2",
                    slot_key="deleg_h-1", max_async_children=1)
    stranger = batch(runtime, lambda: {"results": []}, max_async_children=1)
    assert (sibling["status"], stranger["status"]) == ("dispatched", "rejected")
    runtime.engine.release_slot_hold("deleg_h-1")
    gate.set()
    wait(runtime, "deleg_h-2")
    assert not runtime.engine.slots
    assert batch(runtime, lambda: {"results": []}, max_async_children=1)["status"] == "dispatched"


def test_a_hold_is_given_back_when_scheduling_fails(runtime, monkeypatch):
    class Refusing:
        def submit(self, fn):
            raise RuntimeError("pool is shut down")

    monkeypatch.setattr(runtime.engine, "pool_for", lambda n: Refusing())
    res = batch(runtime, lambda: {}, hold_slot=True)
    assert res["status"] == "rejected" and "Failed to schedule async delegation batch" in res["error"]
    assert not runtime.engine.slots and runtime.engine.active_count() == 0


def test_generated_ids_carry_48_random_bits():
    ids = {new_delegation_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(i.startswith("deleg_") and len(i) == len("deleg_") + 12 for i in ids)
