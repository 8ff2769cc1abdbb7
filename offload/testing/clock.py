"""``FakeClock``: drive offload's background loops (``offload.engine.loop.Loop``) in a test
without threads and without sleeping, as trio's ``MockClock`` drives its tasks.

Hand it to whatever takes a ``clock=`` (the engine's stall loop, the PostgreSQL lease,
outbox and listener, the owner loop). A loop started on it gets no thread: it is scheduled,
and ``advance(seconds)`` runs every step that falls due, in the caller's thread, in order of
due time (ties: the loop started first), moving ``now()`` to each step's time::

    clock = FakeClock()
    loop = Loop("ticker", step, interval_s=10, clock=clock)
    loop.start()
    clock.advance(25)  # step(10.0), step(20.0); now() == 25.0

Invariants: ``now()`` never goes back; within one ``advance`` a loop steps at most once per
instant, so a step that asks to run again at once (delay 0) or wakes itself runs again at the
next instant reached (another loop's due time, or the end of the advance), never in a tight
loop; a woken loop (``Loop.wake``) is due at the current instant, so ``advance(0)`` runs it.
Drive one clock from one thread at a time; loops may be started from any thread.
"""
from __future__ import annotations

import threading

from offload.engine.loop import Clock, Run

MAX_STEPS_PER_ADVANCE = 100_000  # far above any test's need; past it a loop is spinning


class FakeClock(Clock):
    """Time that moves only when ``advance`` is called."""

    def __init__(self, now_s: float = 0.0) -> None:
        self._now_s = float(now_s)
        self._due_at: dict[Run, float] = {}  # live runs by next due time, in start order
        self._lock = threading.Lock()  # guards _due_at: loops may start from other threads
        self._advancing = threading.Lock()

    def now(self) -> float:
        return self._now_s

    def wait(self, signal: threading.Event, timeout_s: float) -> bool:
        """Never blocks: no thread waits on a fake clock; ``advance`` runs the steps."""
        return signal.is_set()

    def spawn(self, run: Run) -> None:
        with self._lock:
            self._due_at[run] = self._now_s + run.first_delay_s
        return None

    def scheduled(self) -> dict[str, float]:
        """Each running loop's name and when it steps next (a woken one: now)."""
        with self._lock:
            return {run.name: self._effective_at(run, at) for run, at in self._due_at.items()
                    if not (run.exited or run.stopping)}

    def advance(self, seconds: float = 0.0) -> int:
        """Move time forward by ``seconds``, running every step due up to then; the number
        of steps run."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance({seconds}): time never goes back; pass seconds >= 0")
        if not self._advancing.acquire(blocking=False):
            raise RuntimeError("FakeClock.advance was called while it was advancing (from a step, or from a "
                               "second thread); drive one clock from one place")
        try:
            return self._advance_to(self._now_s + seconds)
        finally:
            self._advancing.release()

    def _advance_to(self, target_s: float) -> int:
        stepped_at: dict[Run, float] = {}  # the instant each run last stepped in this advance
        steps = 0
        while True:
            run = self._next_due(target_s, stepped_at)
            if run is None:
                if self._now_s >= target_s:
                    return steps
                self._now_s = target_s  # runs that stepped at an earlier instant may be due again here
                continue
            run.signal.clear()
            delay_s = run.tick(self._now_s)
            stepped_at[run] = self._now_s
            with self._lock:
                if delay_s is None:
                    self._due_at.pop(run, None)
                else:
                    self._due_at[run] = self._now_s + delay_s
            steps += 1
            if steps >= MAX_STEPS_PER_ADVANCE:
                raise RuntimeError(f"FakeClock.advance ran {steps} steps without reaching {target_s}: loop "
                                   f"{run.name} keeps asking to run again; is its step spinning?")

    def _next_due(self, target_s: float, stepped_at: dict[Run, float]) -> Run | None:
        """The run due first, at or before ``target_s``; ``now()`` moves to its instant."""
        with self._lock:
            for run in [r for r in self._due_at if r.exited or r.stopping]:
                del self._due_at[run]  # a stopped run never steps again
            best: tuple[float, Run] | None = None
            for run, due_at in self._due_at.items():
                at = max(self._effective_at(run, due_at), self._now_s)
                if at > target_s or stepped_at.get(run) == at:
                    continue
                if best is None or at < best[0]:
                    best = (at, run)
        if best is None:
            return None
        self._now_s = best[0]
        return best[1]

    def _effective_at(self, run: Run, due_at: float) -> float:
        return self._now_s if run.signal.is_set() else due_at
