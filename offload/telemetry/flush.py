"""When telemetry leaves the process, so it survives however the process ends.

- **At once** (``FlushSoon``, a span processor): when a span a crash must not lose ends -- a
  unit's ``offload.delegation.dispatch`` span (ended at dispatch; the unit span is its child, so a
  process that recovers the unit has a parent for it), a finished ``offload.subagent``, a finished
  parent ``offload.turn`` -- everything ended so far is exported on this module's thread, not after
  the batch processor's delay (~5 s), so a SIGKILL a second later still leaves them exported.
- **At SIGTERM and SIGHUP** (``on_termination``): everything ended is exported, traces and metrics
  side by side, waiting at most the exit wait; delivery spans in flight are ended
  (``offload.ended_by=SIGTERM``). Unit spans are not: the process that recovers the unit emits
  them. The flush runs on its own thread (``offload.owner.signals``: the handler's main thread may
  hold the tracer's lock); then the signal does what it did before (by default the process dies
  of it: exit status 128+n, 143 for SIGTERM), or the previous Python handler runs.
- **At exit**: ``export.shutdown_bounded`` (an ``atexit`` hook).

Invariant: no export runs on the engine's or an agent's thread; a flush is awaited only at a
termination signal or at exit, and then for at most ``export.exit_wait_s``.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from opentelemetry.sdk.trace import SpanProcessor

logger = logging.getLogger("offload.telemetry")

DISPATCH = "offload.delegation.dispatch"
URGENT = frozenset({DISPATCH, "offload.subagent", "offload.turn"})  # flushed as soon as they end


class FlushSoon(SpanProcessor):
    """A span processor placed after the batch processors: when an urgent span ends, wakes a
    daemon thread that flushes them (pokes while a flush runs collapse into one more flush)."""

    def __init__(self, flush: Callable[[], Any]) -> None:
        self._flush, self._wanted = flush, threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def on_end(self, span: Any) -> None:
        if span.name in URGENT:
            self.poke()

    def poke(self) -> None:
        self._wanted.set()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="offload-flush-soon", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while self._wanted.wait(30.0):
            self._wanted.clear()
            try:
                self._flush()
            except Exception:  # the batch thread exports it later; a flush must not kill this thread
                logger.debug("flushing urgent spans failed", exc_info=True)



def in_parallel(steps: list[Callable[[], Any]], wait_s: float) -> bool:
    """Run ``steps`` on daemon threads side by side; True if all ended within ``wait_s``."""
    threads = [threading.Thread(target=step, name="offload-telemetry-flush", daemon=True) for step in steps]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + wait_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


def on_termination(flush: Callable[[str], Any]) -> None:
    """Before SIGTERM and SIGHUP do what they did, ``flush(signal name)``, on its own thread
    (``offload.owner.signals``). Call from the main thread (Python sets signal handlers only
    there); a signal set to be ignored stays ignored."""
    from offload.owner.signals import before_termination

    before_termination(flush)
