"""Engine plumbing shared by the cases: a fresh ``$HERMES_HOME`` per case or round with its
own ``offload.Offload`` (``runtime()``; the previous one is closed), the state.db put in WAL
mode first (the session store owns the journal mode; the ledger never changes it), a clean
engine and an empty completion queue between rounds, and a collector thread that stamps each
completion event as it arrives.
"""
from __future__ import annotations

import os
import queue
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from offload.engine.units import UnitSpec
from offload.origin import Origin
from offload.runtime import Offload

BENCH_ORIGIN = Origin(session_key="bench:session")

_runtime: Offload | None = None  # the runtime of the home in use (one at a time in a bench process)


def make_wal_db(path: Path) -> Path:
    """Create ``path`` as an SQLite file in WAL mode (what the session store does)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    conn = sqlite3.connect(path)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    finally:
        conn.close()
    if mode.lower() != "wal":
        raise RuntimeError(f"{path} refused WAL mode (got {mode!r}); put the bench work dir on a local disk")
    return path


def new_home(root: Path, name: str) -> Path:
    """A fresh HERMES_HOME under ``root`` with a WAL state.db, made current for the engine."""
    home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    make_wal_db(home / "state.db")
    use_home(home)
    return home


def use_home(home: Path, owner_loop: bool = True) -> Offload:
    """Make ``home`` current: a new runtime on it (its config read now), the previous one closed.
    ``owner_loop=False``: the runtime's owner loop is never started (to measure what it costs)."""
    global _runtime
    os.environ["HERMES_HOME"] = str(home)  # subprocesses and the session store read it
    if _runtime is not None:
        _runtime.close()
    _runtime = Offload(home=home)
    if not owner_loop:
        _runtime.engine.on_dispatched = None
    return _runtime


def runtime() -> Offload:
    if _runtime is None:
        raise RuntimeError("no bench home yet: call harness.new_home() or use_home() first")
    return _runtime


def drain_queue() -> int:
    drained = 0
    if _runtime is None:
        return drained
    while True:
        try:
            _runtime.bus.completion_queue.get_nowait()
        except queue.Empty:
            return drained
        drained += 1


def close_runtime() -> None:
    """Close the current runtime (its ledger connections included), e.g. before its PostgreSQL
    schema is dropped: a connection still in the schema deadlocks the DROP."""
    global _runtime
    if _runtime is not None:
        _runtime.close()
        _runtime = None


def reset_engine() -> None:
    """Between rounds and cases: no records, no pool, no leftover event."""
    if _runtime is not None:
        _runtime.engine.reset()
        _runtime.deliveries.reset()
    drain_queue()


class Collector:
    """A thread that takes ``expected`` events off a queue and stamps each one on arrival.

    ``key(evt)`` says which unit an event belongs to; ``arrived_at`` maps it to
    ``time.perf_counter()`` at the moment ``get()`` returned it.
    """

    def __init__(self, source: queue.Queue, expected: int, key: Callable[[Any], Any]) -> None:
        self.arrived_at: dict[Any, float] = {}
        self._source, self._expected, self._key = source, expected, key
        self._thread = threading.Thread(target=self._run, name="bench-collector", daemon=True)

    def start(self) -> "Collector":
        self._thread.start()
        return self

    def _run(self) -> None:
        for _ in range(self._expected):
            try:
                evt = self._source.get(timeout=120)
            except queue.Empty:
                return
            self.arrived_at[self._key(evt)] = time.perf_counter()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def goal_index(evt: dict[str, Any]) -> int:
    """Benchmark goals are ``u<index>``: the unit's position in the round."""
    return int(str(evt.get("goal", "u-1"))[1:])


def dispatch_unit(index: int, runner: Callable[[], Any], cap: int, progress_fn=None) -> dict[str, Any]:
    """One engine dispatch the way ``delegate_task`` makes it for a single task."""
    spec = UnitSpec(f"u{index}", role="leaf", model="bench-model", origin=BENCH_ORIGIN)
    return runtime().engine.dispatch(spec, runner, cap, progress_fn=progress_fn)


def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.002) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()
