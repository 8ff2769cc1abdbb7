"""The stall check: the pure sweep with a chosen ``now``, the engine applying it, and its loop\n(on a fake clock, and as the real ``async-delegate-stale-monitor`` thread)."""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import replace

import pytest

from tests.runtime_support import hermes_dispatch, wait
from offload.engine.engine import Delegations
from offload.engine.monitor import UNREADABLE, Observation, Thresholds, sweep
from offload.engine.policy import Policy
from offload.engine.units import UnitSpec
from offload.ledger import open_ledger
from offload.testing import FakeClock

LIMITS = Thresholds(idle_s=450.0, in_tool_s=1200.0, grace_s=120.0)


def obs(**kw) -> Observation:
    base = dict(delegation_id="d", status="running", started=True, token=(1,), in_tool=False, last_token=(1,),
                progress_at=0.0, interrupted_at=None)
    base.update(kw)
    return Observation(**base)


def test_a_changed_token_is_progress():
    d = sweep([obs(token=(2,))], now=10_000.0, limits=LIMITS)
    assert d.progressed == {"d": ((2,), 10_000.0)} and not d.stalled


def test_a_changed_token_counts_from_the_childs_last_activity_when_it_says():
    """The first sample of a child silent since its start (a hung endpoint) does not restart the
    clock: the stall clock is the child's idle time, and past the threshold it stalls at once."""
    silent = obs(token=((1, None, 1000.0),), last_token=None, progress_at=0.0, activity_age_s=460.0)
    d = sweep([silent], now=460.0, limits=LIMITS)
    assert d.progressed == {"d": (((1, None, 1000.0),), 0.0)}
    (stall,) = d.stalled
    assert stall.quiet_s == 460.0
    recent = sweep([replace(silent, activity_age_s=2.0)], now=460.0, limits=LIMITS)
    assert recent.progressed["d"][1] == 458.0 and not recent.stalled


def test_quiet_past_the_idle_threshold_stalls():
    assert not sweep([obs()], now=449.9, limits=LIMITS).stalled
    (stall,) = sweep([obs()], now=450.0, limits=LIMITS).stalled
    assert (stall.quiet_s, stall.threshold_s, stall.in_tool) == (450.0, 450.0, False)


def test_in_tool_uses_the_higher_threshold():
    assert not sweep([obs(in_tool=True)], now=1000.0, limits=LIMITS).stalled
    (stall,) = sweep([obs(in_tool=True)], now=1200.0, limits=LIMITS).stalled
    assert stall.in_tool and stall.threshold_s == 1200.0


def test_a_unit_waiting_in_the_pool_accrues_nothing_but_keeps_the_monitor_alive():
    d = sweep([obs(started=False)], now=10**6, limits=LIMITS)
    assert not d.stalled and d.monitorable


def test_unreadable_sampler_is_never_progress_and_never_in_tool():
    (stall,) = sweep([obs(token=UNREADABLE, in_tool=True)], now=450.0, limits=LIMITS).stalled
    assert not stall.in_tool


def test_grace_window_then_expiry():
    assert not sweep([obs(status="stalling", interrupted_at=100.0)], now=219.0, limits=LIMITS).expired
    assert sweep([obs(status="stalling", interrupted_at=100.0)], now=220.0, limits=LIMITS).expired == ["d"]


def test_nothing_to_watch():
    assert sweep([], now=0.0, limits=LIMITS).monitorable is False


@pytest.mark.timeout(30)
def test_engine_interrupts_then_forces_stalled_and_ignores_the_late_return(runtime, monkeypatch):
    # the loop stays out of the way
    monkeypatch.setattr(runtime, "policy", replace(runtime.policy, stall_check_interval_s=3600.0))
    started, gate, interrupted = threading.Event(), threading.Event(), threading.Event()
    res = hermes_dispatch(runtime, 
        goal="frozen   child\nwith spaces", context=None, toolsets=None, role="leaf", model="m", session_key="",
        runner=lambda: (started.set(), gate.wait(10), {"status": "completed", "summary": "late"})[2],
        interrupt_fn=interrupted.set, progress_fn=lambda: (((0, None, 1.0),), False))
    did = res["delegation_id"]
    assert started.wait(5)
    now = time.monotonic()
    runtime.engine.stalls.check(now)  # first sample stores the token
    runtime.engine.stalls.check(now + runtime.policy.stall_idle_s + 1)
    assert interrupted.is_set()
    (item,) = [d for d in runtime.engine.list() if d["delegation_id"] == did]
    assert item["status"] == "stalling" and item["stall_threshold_seconds"] == runtime.policy.stall_idle_s
    idle_s, grace_s = runtime.policy.stall_idle_s, runtime.policy.stall_grace_s
    runtime.engine.stalls.check(now + idle_s + 2 + grace_s)  # margin: float sums
    evt = wait(runtime, did)
    assert evt["status"] == "stalled" and evt["stall_phase"] == "idle"
    assert 'Background task "frozen child with spaces" stopped responding after 8 min' in evt["error"]
    gate.set()
    with pytest.raises(Exception):
        wait(runtime, did, timeout_s=0.5)
    assert runtime.engine.active_count() == 0


@pytest.mark.timeout(30)
def test_monitor_thread_exits_when_nothing_is_left_to_watch(runtime, monkeypatch):
    monkeypatch.setattr(runtime, "policy", replace(runtime.policy, stall_check_interval_s=0.01))
    gate = threading.Event()
    res = hermes_dispatch(runtime, goal="g", context=None, toolsets=None, role="leaf", model="m",
                                       session_key="", runner=lambda: (gate.wait(10), {})[1],
                                       progress_fn=lambda: ((time.monotonic(),), False))
    thread = runtime.engine.stalls.thread
    assert thread is not None and thread.name == "async-delegate-stale-monitor" and thread.daemon
    gate.set()
    wait(runtime, res["delegation_id"])
    thread.join(timeout=5)
    assert not thread.is_alive()


@pytest.mark.timeout(30)
def test_the_stall_loop_on_a_fake_clock_interrupts_then_forces_stalled_then_exits():
    clock, bus = FakeClock(), queue.Queue()
    ledger = open_ledger("memory://")
    policy = Policy(stall_check_interval_s=10.0, stall_idle_s=45.0, stall_in_tool_s=120.0, stall_grace_s=20.0)
    engine = Delegations(ledger=lambda: ledger, publish=bus.put, policy=lambda: policy, clock=clock)
    started, gate, interrupted = threading.Event(), threading.Event(), threading.Event()
    try:
        handle = engine.dispatch(UnitSpec("frozen"), lambda: (started.set(), gate.wait(10), {"status": "completed"})[2],
                                 1, interrupt_fn=interrupted.set, progress_fn=lambda: ((1,), False))
        assert started.wait(5)
        assert engine.loops() == [engine.stalls.loop] and engine.stalls.loop.running and engine.stalls.thread is None
        assert clock.scheduled() == {"async-delegate-stale-monitor": 10.0}
        clock.advance(40)  # sweeps at 10..40: the first stores the token, none is 45 s quiet yet
        assert not interrupted.is_set()
        clock.advance(20)  # the sweep at 60 sees 50 s without progress since 10
        assert interrupted.is_set() and engine.list()[0]["status"] == "stalling"
        clock.advance(10)
        assert bus.empty()  # grace runs from the interrupt at 60 to 80
        clock.advance(10)
        evt = bus.get(timeout=10)
        assert (evt["delegation_id"], evt["status"]) == (handle["delegation_id"], "stalled")
        clock.advance(10)  # the sweep at 90 finds nothing to watch: the loop exits
        assert not engine.stalls.loop.running and clock.scheduled() == {}
    finally:
        gate.set()
        engine.reset()
