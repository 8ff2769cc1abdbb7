"""Case 2 — scale of live work: units blocked in their runners, each with a progress sampler
whose token moves on every sample (an active child), so a sweep does its full write path.

Per round, at three live counts (100, 1,000 and 2,000 by default): the time of one stall
sweep (``_check_stalls(now)``) and of ``list_async_delegations()`` (fastest of 25 equally
long samples in 5 bursts), the listing's CPU time per live unit (its thread's CPU time, which
the machine's other processes do not inflate as much as they do wall time) back to back and
after evicting the CPU caches (as other work between two /agents polls does), and one more
dispatch (median of 10). Linearity is the ratio of times over the ratio of counts: 1,000/100
(where the roster outgrows the CPU caches) and 2,000/1,000 (past that step); for the CPU per
unit, flat is 1. In a separate phase (tracemalloc slows everything, so no
timing runs under it): Python heap and RSS per live unit.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

from bench.cases import harness
from bench.report.stats import check, headline, median, spread, to_ms, to_us

BURSTS, SAMPLES_PER_BURST, BURST_GAP_S = 5, 5, 0.05  # timed samples per point, spread out in time
EXTRA_DISPATCHES = 10  # "one more dispatch", timed this many times at each live count
# Copied over before each cold listing: 16 MB touched pushes every unit's record, sampler and
# listed copy out of the per-core L2 (1 MB here), as other work does between two /agents polls.
_EVICT_SRC, _EVICT_DST = bytearray(8 << 20), bytearray(8 << 20)


class LiveUnits:
    """Dispatches units that block until ``release()``, each with a moving progress token."""

    def __init__(self, cap: int) -> None:
        self.gate = threading.Event()
        self.cap = cap
        self.dispatched = 0

    def _runner(self) -> dict[str, Any]:
        self.gate.wait(300)
        return {"status": "completed", "summary": "released"}

    def dispatch(self, count: int) -> list[float]:
        latencies = []
        for _ in range(count):
            ticks = itertools.count()
            start = time.perf_counter()
            handle = harness.dispatch_unit(self.dispatched, self._runner, self.cap,
                                           progress_fn=lambda t=ticks: (next(t), False))
            latencies.append(time.perf_counter() - start)
            if handle["status"] != "dispatched":
                raise RuntimeError(f"live unit {self.dispatched} rejected: {handle.get('error')}")
            self.dispatched += 1
        return latencies

    def wait_started(self, timeout_s: float = 60) -> None:
        def all_started() -> bool:
            engine = harness.runtime().engine
            with engine.lock:
                return all(r.get("_started") for r in engine.records.values() if r["status"] == "running")
        if not harness.wait_until(all_started, timeout_s):
            raise RuntimeError("live units did not all start in time")

    def release_and_wait(self, timeout_s: float = 120) -> int:
        self.gate.set()
        received = 0
        deadline = time.monotonic() + timeout_s
        while received < self.dispatched and time.monotonic() < deadline:
            harness.runtime().bus.completion_queue.get(timeout=max(0.1, deadline - time.monotonic()))
            received += 1
        return received


def _timed_min(fn: Callable[[], Any], calls: int = 1, clock: Callable[[], float] = time.perf_counter,
               evict: bool = False) -> float:
    """Seconds per call: the fastest sample of ``calls`` back-to-back calls.

    A CPU-bound call is only ever slowed by the machine's other work, so the fastest sample
    is its cost; samples come in bursts spread over a quarter second, so one busy moment of
    a shared machine cannot spoil them all. ``calls`` makes samples at the small live count
    as long as one call at the large count: a short sample finds a quiet moment far more
    often than a long one, which would bias the large/small ratio upward; ``evict`` pushes
    the CPU caches' contents out before each sample. ``clock`` may be
    ``time.thread_time`` for work that never blocks: CPU time does not count the moments
    other processes of a loaded machine held the core.
    """
    samples = []
    for burst in range(BURSTS):
        if burst:
            time.sleep(BURST_GAP_S)
        for _ in range(SAMPLES_PER_BURST):
            if evict:
                _EVICT_DST[:] = _EVICT_SRC
            start = clock()
            for _ in range(calls):
                fn()
            samples.append((clock() - start) / calls)
    return min(samples)


def _measure_point(units: LiveUnits, calls: int) -> dict[str, float]:
    units.wait_started()
    live = units.dispatched
    engine = harness.runtime().engine
    sweep_s = _timed_min(lambda: engine.stalls.check(time.monotonic()), calls=calls)
    listing_s = _timed_min(engine.list, calls=calls)
    # The listing never blocks (the samplers are ours), so its CPU time is its cost.
    listing_cpu_s = _timed_min(engine.list, calls=calls, clock=time.thread_time)
    # Back-to-back listings of 100 units find them all in cache; of 1,000 they do not.
    cold_cpu_s = _timed_min(engine.list, clock=time.thread_time, evict=True)
    dispatch_s = median(units.dispatch(EXTRA_DISPATCHES))
    return {"sweep_ms": to_ms(sweep_s), "listing_ms": to_ms(listing_s),
            "listing_cpu_us_per_unit": to_us(listing_cpu_s) / live,
            "listing_cold_cpu_us_per_unit": to_us(cold_cpu_s) / live, "dispatch_us": to_us(dispatch_s)}


def timing_round(small: int, large: int, root: Path) -> dict[str, float]:
    """Figures at ``small``, ``large`` and twice ``large`` live units, keyed ``*_at_<point>``."""
    harness.reset_engine()
    harness.new_home(root, "scale")
    double = 2 * large
    units = LiveUnits(cap=double + 4 * EXTRA_DISPATCHES)
    figures: dict[str, float] = {}
    for point, live in (("small", small), ("large", large), ("double", double)):
        units.dispatch(max(0, live - units.dispatched))
        at_point = _measure_point(units, calls=max(1, round(double / live)))
        figures.update({f"{k}_at_{point}": v for k, v in at_point.items()})
    received = units.release_and_wait()
    if received != units.dispatched:
        raise RuntimeError(f"only {received} of {units.dispatched} live units reported after release")
    harness.reset_engine()
    return figures


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_round(live: int, root: Path) -> dict[str, float]:
    """Python heap (tracemalloc) and RSS added per live unit, record + worker thread + ledger."""
    harness.reset_engine()
    harness.new_home(root, "scale-mem")
    units = LiveUnits(cap=live)
    units.dispatch(1)  # warm: pool, ledger connection, monitor thread
    units.wait_started()
    tracemalloc.start()
    heap_before, rss_before = tracemalloc.get_traced_memory()[0], _rss_bytes()
    units.dispatch(live - 1)
    units.wait_started()
    heap_after, rss_after = tracemalloc.get_traced_memory()[0], _rss_bytes()
    tracemalloc.stop()
    units.release_and_wait()
    harness.reset_engine()
    return {"heap_kib_per_unit": (heap_after - heap_before) / (live - 1) / 1024,
            "rss_kib_per_unit": (rss_after - rss_before) / (live - 1) / 1024}


def run(small: int, large: int, rounds: int, root: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    timings, memory = [], []
    for r in range(rounds):
        timings.append(timing_round(small, large, root))
        memory.append(memory_round(large, root))
        t = timings[-1]
        log(f"  case 2 round {r + 1}/{rounds}: sweep {t['sweep_ms_at_large']:.2f} ms, "
            f"listing {t['listing_ms_at_large']:.2f} ms at {large} live")
    return summarize(small, large, rounds, timings, memory)


def summarize(small: int, large: int, rounds: int, timings: list[dict], memory: list[dict]) -> dict[str, Any]:
    series = lambda rows, key: [row[key] for row in rows]  # noqa: E731
    metrics = {key: spread(series(timings, key)) for key in timings[0]}
    metrics.update({key: spread(series(memory, key)) for key in memory[0]})
    growth = large / small
    linear = f"<= {1.2 * growth:.0f} (linear = {growth:.0f})"
    heads = []
    for fn, key in (("stall sweep", "sweep_ms"), ("listing", "listing_ms")):
        heads.append(headline(f"{fn}: {large} live / {small} live", series(timings, f"{key}_at_large"),
                              series(timings, f"{key}_at_small"), target_max=1.2 * growth, target=linear))
        heads.append(headline(f"{fn}: {2 * large} live / {large} live", series(timings, f"{key}_at_double"),
                              series(timings, f"{key}_at_large"), target_max=2.4, target="<= 2.4 (linear = 2)"))
    heads.append(headline(f"listing CPU per live unit: {large} live / {small} live",
                          series(timings, "listing_cpu_us_per_unit_at_large"),
                          series(timings, "listing_cpu_us_per_unit_at_small"), target_max=1.2,
                          target="<= 1.2 (linear = 1)"))
    heads.append(headline(f"same, caches evicted before each listing: {large} live / {small} live",
                          series(timings, "listing_cold_cpu_us_per_unit_at_large"),
                          series(timings, "listing_cold_cpu_us_per_unit_at_small"), target_max=None,
                          target="(info; flat = 1)"))
    heads.append(headline(f"one more dispatch: {large} live / {small} live", series(timings, "dispatch_us_at_large"),
                          series(timings, "dispatch_us_at_small"), target_max=None, target="(info)"))
    checks = [
        check(f"stall sweep at {large} live", series(timings, "sweep_ms_at_large"), unit="ms",
              target_max=10.0, target="< 10 ms"),
        check(f"listing at {large} live", series(timings, "listing_ms_at_large"), unit="ms",
              target_max=10.0, target="< 10 ms"),
    ]
    return {"case": 2, "title": "scale of live work", "params": {"small": small, "large": large, "rounds": rounds},
            "metrics": metrics, "headlines": heads, "checks": checks, "skipped": None}
