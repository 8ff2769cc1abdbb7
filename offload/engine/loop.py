"""The one background-loop primitive: a named loop that calls a pure-ish ``step(now)`` on an
injected clock (``Loop``), and the real clock that drives it with a daemon thread (``Clock``).

Every background loop of offload (the stall loop, the PostgreSQL lease heartbeat, outbox
replay and LISTEN, the owner loop) is a ``Loop``; what it does lives in its step, which the
tests call with a chosen ``now`` or drive with ``offload.testing.FakeClock`` and no threads.

A step returns what the loop does next:

- ``True`` (or ``None``): call again after ``interval_s``;
- ``False``: nothing is left to do, the loop exits (idle-exit) once ``still_idle()``
  confirms it under the loop's start lock; a caller that makes new work visible *before*
  calling ``start()`` is therefore never left without a running loop;
- a number: call again after that many seconds (0: at once).

Invariants:
- at most one run (start-to-exit) is live per loop, and steps never overlap, not even those
  of a run that is stopping and the run a later ``start()`` began;
- a step that raises never ends the loop: the first failure of each kind (exception type)
  since the last good step is logged at ERROR with its traceback, repeats at DEBUG, and the
  loop tries again after ``interval_s``;
- ``stop()`` cuts the wait short, lets a step in progress finish, never steps again in that
  run, and joins for a bounded time; ``start()`` afterwards begins a new run.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable, Union

logger = logging.getLogger("offload.engine")  # the engine's logger (offload.engine.log), named here: no import

Step = Callable[[float], Union[bool, float, None]]
Interval = Union[float, Callable[[], float]]


class Clock:
    """Real time: monotonic ``now()``, a ``wait`` that ``wake``/``stop`` cut short, and one
    daemon thread per run, named after its loop. ``offload.testing.FakeClock`` overrides all
    three to run steps from ``advance()`` instead."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, signal: threading.Event, timeout_s: float) -> bool:
        """Wait up to ``timeout_s``; True if ``signal`` was set (a wake or a stop) meanwhile."""
        return signal.wait(timeout_s)

    def spawn(self, run: "Run") -> threading.Thread | None:
        thread = threading.Thread(target=self._drive, args=(run,), name=run.name, daemon=True)
        thread.start()
        return thread

    def _drive(self, run: "Run") -> None:
        delay_s: float | None = run.first_delay_s
        while delay_s is not None:
            if self.wait(run.signal, delay_s):
                run.signal.clear()  # before the step: a wake during the step is not lost
            delay_s = run.tick(self.now())


REAL_CLOCK = Clock()


class Run:
    """One start-to-exit of a ``Loop``, as its clock sees it: ``tick(now)`` runs one step and
    returns the delay until the next one, or None once the run is over."""

    def __init__(self, loop: "Loop", first_delay_s: float) -> None:
        self.name = loop.name
        self.first_delay_s = first_delay_s
        self.signal = threading.Event()  # set by wake() and stop()
        self.stopping = False
        self.exited = False
        self.thread: threading.Thread | None = None
        self._loop = loop

    def tick(self, now: float) -> float | None:
        return self._loop._tick(self, now)

    def live(self) -> bool:
        return not self.exited and (self.thread is None or self.thread.is_alive())


class Loop:
    """A named background loop calling ``step(now)`` every ``interval_s`` (a number, or a
    function read before each wait: a policy the app may change). Thread-safe."""

    def __init__(self, name: str, step: Step, interval_s: Interval, *, clock: Clock | None = None,
                 still_idle: Callable[[], bool] | None = None, immediate: bool = False, what: str = "",
                 log: logging.Logger = logger) -> None:
        """``immediate``: the first step runs at start, not after one interval. ``what``
        names the step in log lines ("stall check"). ``still_idle``: see the module doc."""
        self.name, self.clock = name, clock or REAL_CLOCK
        self._step, self._interval, self._still_idle = step, interval_s, still_idle
        self.immediate, self.what, self._log = immediate, what or f"{name} step", log
        self._lock = threading.Lock()  # start, stop and the idle-exit decision
        self._step_lock = threading.Lock()  # one step at a time, across runs
        self._run: Run | None = None
        self._failed_kinds: set[type[BaseException]] = set()

    def __repr__(self) -> str:
        return f"<Loop {self.name} {'running' if self.running else 'stopped'}>"

    def interval_s(self) -> float:
        return float(self._interval() if callable(self._interval) else self._interval)

    @property
    def running(self) -> bool:
        run = self._run
        return run is not None and not run.stopping and run.live()

    @property
    def thread(self) -> threading.Thread | None:
        """The thread of the live run (None when stopped, idle, or driven by a fake clock)."""
        run = self._run
        return run.thread if run is not None and run.live() else None

    def start(self) -> bool:
        """Start a run unless one is live (idempotent); True if this call started one."""
        with self._lock:
            if self._run is not None and not self._run.stopping and self._run.live():
                return False
            run = self._run = Run(self, 0.0 if self.immediate else self.interval_s())
            try:
                run.thread = self.clock.spawn(run)
            except BaseException:  # no thread (the process is at its limit): the next start tries again
                run.exited = True
                raise
            return True

    def wake(self) -> None:
        """Run the next step now instead of after the current wait."""
        run = self._run
        if run is not None:
            run.signal.set()

    def request_stop(self) -> None:
        """Tell the live run to exit after the step in progress, without waiting for it."""
        with self._lock:
            run = self._run
            if run is not None:
                run.stopping = True
                run.signal.set()

    def join(self, timeout_s: float = 5.0) -> bool:
        """Wait up to ``timeout_s`` for the last run's thread to end; True if none is left (a
        run driven by a fake clock has no thread: once stopping it never steps again)."""
        run = self._run
        thread = run.thread if run is not None else None
        if thread is None:
            return True
        if thread is not threading.current_thread():  # a step stopping its own loop cannot wait for itself
            thread.join(timeout_s)
        return not thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """``request_stop`` then ``join``; True if the loop's thread has ended."""
        self.request_stop()
        return self.join(timeout_s)

    def _tick(self, run: Run, now: float) -> float | None:
        with self._step_lock:
            if run.stopping:
                return self._exit(run)
            outcome = self._step_safely(now)
        if run.stopping:
            return self._exit(run)
        if outcome is False:
            with self._lock:
                if run.stopping or self._confirmed_idle():
                    return self._exit(run)
            return self.interval_s()  # work arrived while the step decided it was idle
        if outcome is True or outcome is None:
            return self.interval_s()
        return max(0.0, float(outcome))

    def _confirmed_idle(self) -> bool:
        if self._still_idle is None:
            return True
        try:
            return bool(self._still_idle())
        except Exception:  # cannot tell: keep running, the next step asks again
            self._log.debug("%s: idle check failed", self.name, exc_info=True)
            return False

    @staticmethod
    def _exit(run: Run) -> None:
        run.exited = True
        return None

    def _step_safely(self, now: float) -> bool | float | None:
        try:
            outcome = self._step(now)
        except Exception as exc:  # the loop outlives any bug in one step
            kind = type(exc)
            if kind in self._failed_kinds:
                self._log.debug("%s failed again: %s", self.what, exc, exc_info=True)
            else:
                self._failed_kinds.add(kind)
                self._log.error("%s failed; the %s loop goes on and tries again in %.3gs (repeats of this "
                                "error are logged at DEBUG)", self.what, self.name, self.interval_s(), exc_info=True)
            return True
        self._failed_kinds.clear()
        return outcome


def stop_all(loops: Iterable[Loop], timeout_s: float = 5.0) -> list[Loop]:
    """Stop every loop together (all are told first, then each is joined within one shared
    ``timeout_s``); the loops whose thread did not end in time."""
    loops = list(loops)
    for loop in loops:
        loop.request_stop()
    deadline = time.monotonic() + timeout_s
    return [loop for loop in loops if not loop.join(max(0.0, deadline - time.monotonic()))]
