"""The background-loop primitive (``offload.engine.loop``) and the fake clock that drives it
without threads (``offload.testing.FakeClock``)."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from offload.engine.loop import Clock, Loop, stop_all
from offload.testing import FakeClock

pytestmark = pytest.mark.timeout(30)


class Steps:
    """A step that records each ``now`` and returns the scripted outcomes (then True)."""

    def __init__(self, *outcomes) -> None:
        self.at: list[float] = []
        self.outcomes = list(outcomes)

    def __call__(self, now: float):
        self.at.append(now)
        return self.outcomes.pop(0) if self.outcomes else True


def test_steps_run_every_interval_as_the_fake_clock_advances():
    clock, step = FakeClock(), Steps()
    loop = Loop("ticker", step, 10.0, clock=clock)
    assert loop.start() and not loop.start()  # idempotent while live
    assert loop.thread is None and loop.running  # a fake clock runs it without a thread
    assert clock.advance(9.9) == 0 and step.at == []
    assert clock.advance(15.1) == 2
    assert step.at == [10.0, 20.0] and clock.now() == 25.0
    assert clock.scheduled() == {"ticker": 30.0}


def test_immediate_runs_at_start_and_a_number_sets_the_next_delay():
    clock, step = FakeClock(100.0), Steps(2.5, 0.0, True)
    Loop("l", step, 60.0, clock=clock, immediate=True).start()
    clock.advance(0)
    assert step.at == [100.0]
    clock.advance(5)
    # 2.5 s later; then "at once", which a fake clock runs at the next instant it reaches (105)
    assert step.at == [100.0, 102.5, 105.0]


def test_an_interval_function_is_read_before_each_wait():
    clock, step, interval = FakeClock(), Steps(), [1.0]
    Loop("l", step, lambda: interval[0], clock=clock).start()
    clock.advance(1)
    interval[0] = 5.0
    clock.advance(10)
    assert step.at == [1.0, 2.0, 7.0]  # the wait after the step at 1.0 was already 1 s


def test_a_wake_runs_the_next_step_now():
    clock, step = FakeClock(), Steps()
    loop = Loop("l", step, 60.0, clock=clock)
    loop.start()
    clock.advance(7)
    loop.wake()
    assert clock.scheduled() == {"l": 7.0}
    clock.advance(0)
    assert step.at == [7.0]
    clock.advance(60)
    assert step.at == [7.0, 67.0]  # the interval counts from the woken step


def test_idle_exit_only_once_still_idle_confirms_it():
    clock, work = FakeClock(), ["queued"]
    step = Steps(False, False)
    loop = Loop("l", step, 1.0, clock=clock, still_idle=lambda: not work)
    loop.start()
    clock.advance(1)
    assert loop.running  # the step said idle, but work was visible under the start lock
    work.clear()
    clock.advance(1)
    assert not loop.running and clock.scheduled() == {}
    clock.advance(10)
    assert step.at == [1.0, 2.0]
    assert loop.start()  # the next piece of work starts it again
    clock.advance(1)
    assert step.at == [1.0, 2.0, 13.0]


def test_a_failing_step_is_logged_once_per_kind_and_never_ends_the_loop(caplog):
    clock, calls = FakeClock(), []

    def step(now):
        calls.append(now)
        if len(calls) == 4:
            return True  # a good step: the next failure is news again
        raise (KeyError if len(calls) == 3 else ValueError)("boom")
    loop = Loop("l", step, 1.0, clock=clock, what="the test step")
    loop.start()
    with caplog.at_level(logging.DEBUG, logger="offload.engine"):
        clock.advance(5)
    assert calls == [1.0, 2.0, 3.0, 4.0, 5.0] and loop.running
    errors = [(r.exc_info[0], r.getMessage()) for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        (ValueError, "the test step failed; the l loop goes on and tries again in 1s (repeats of this error are "
                     "logged at DEBUG)"),
        (KeyError, errors[1][1]), (ValueError, errors[2][1])]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG] == [
        "the test step failed again: boom"]


def test_a_stopped_fake_run_never_steps_again_and_a_restart_begins_a_new_run():
    clock, step = FakeClock(), Steps()
    loop = Loop("l", step, 1.0, clock=clock)
    loop.start()
    clock.advance(1)
    assert loop.stop() and not loop.running
    clock.advance(5)
    assert step.at == [1.0] and clock.scheduled() == {}
    loop.start()
    clock.advance(1)
    assert step.at == [1.0, 7.0]


def test_a_step_that_keeps_asking_for_at_once_runs_once_per_instant():
    clock, step = FakeClock(), Steps(*([0.0] * 10))
    Loop("spinner", step, 1.0, clock=clock, immediate=True).start()
    Loop("other", Steps(), 0.5, clock=clock).start()
    clock.advance(1)
    assert step.at == [0.0, 0.5, 1.0]


def test_advance_refuses_to_go_back():
    with pytest.raises(ValueError, match="time never goes back"):
        FakeClock().advance(-1)


def test_the_real_loop_is_a_named_daemon_thread_that_stops_promptly():
    stepped = threading.Event()
    loop = Loop("offload-test-loop", lambda now: stepped.set(), 3600.0, immediate=True)
    assert loop.start()
    assert stepped.wait(10)
    thread = loop.thread
    assert thread is not None and thread.name == "offload-test-loop" and thread.daemon
    started = time.monotonic()
    assert loop.stop(timeout_s=10)
    assert time.monotonic() - started < 2  # the hour-long wait was cut short
    assert not thread.is_alive() and loop.thread is None and not loop.running


def test_the_real_loop_logs_a_failing_step_once_and_keeps_stepping(caplog):
    calls, enough = [], threading.Event()

    def step(now):
        calls.append(now)
        if len(calls) >= 5:
            enough.set()
        raise RuntimeError("always")
    loop = Loop("offload-test-failing", step, 0.001, immediate=True)
    with caplog.at_level(logging.DEBUG, logger="offload.engine"):
        loop.start()
        assert enough.wait(10)
        assert loop.stop(timeout_s=10)
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert calls == sorted(calls)  # monotonic time


def test_the_real_loop_exits_when_idle_and_restarts():
    work, steps = [], threading.Semaphore(0)

    def step(now):
        steps.release()
        return bool(work)
    loop = Loop("offload-test-idle", step, 0.001, immediate=True, still_idle=lambda: not work)
    loop.start()
    thread = loop.thread
    assert steps.acquire(timeout=10)
    thread.join(timeout=10)
    assert not thread.is_alive() and not loop.running
    work.append(1)
    assert loop.start()
    assert steps.acquire(timeout=10) and steps.acquire(timeout=10)  # keeps going while there is work
    assert loop.running
    loop.stop()


def test_a_step_never_overlaps_the_step_of_a_run_that_is_stopping():
    inside, release, overlaps, depth = threading.Event(), threading.Event(), [], [0]

    def step(now):
        depth[0] += 1
        overlaps.append(depth[0])
        inside.set()
        release.wait(10)
        depth[0] -= 1
        return True
    loop = Loop("offload-test-overlap", step, 0.001, immediate=True)
    loop.start()
    assert inside.wait(10)
    first = loop.thread
    loop.request_stop()
    inside.clear()
    assert loop.start()  # a new run while the old one is still in its step
    release.set()
    assert inside.wait(10)
    first.join(timeout=10)
    assert not first.is_alive() and max(overlaps) == 1
    loop.stop()


def test_stop_all_tells_every_loop_before_joining_any():
    loops = [Loop(f"offload-test-{i}", lambda now: True, 3600.0) for i in range(3)]
    for loop in loops:
        loop.start()
    started = time.monotonic()
    assert stop_all(loops, timeout_s=10) == []
    assert time.monotonic() - started < 2 and not any(loop.running for loop in loops)


def test_a_run_whose_thread_could_not_start_does_not_block_the_next_start():
    class Refusing(Clock):
        def spawn(self, run):
            raise RuntimeError("can't start new thread")
    loop = Loop("offload-test-spawn", lambda now: True, 3600.0, clock=Refusing())
    with pytest.raises(RuntimeError):
        loop.start()
    assert not loop.running
    loop.clock = Clock()
    assert loop.start() and loop.running
    assert loop.stop(timeout_s=10)
