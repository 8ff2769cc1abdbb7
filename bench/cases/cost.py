"""Case 1 — per-delegation cost: N trivial delegations (the runner returns at once),
dispatched and awaited, through offload, the hand-written floor and huey, in the same round.

For each system and round: wall time from the first dispatch to the last completion seen by
the waiting side, process CPU time over the same window, dispatch latency (call to handle)
and completion latency (runner return to the event in the waiter's hands). The order of the
three systems rotates between rounds so none always runs on a cold (or warm) machine.

Each round also runs every system with the N dispatches spread over ``threads`` threads (8 by
default; systems ``offload_8t`` etc.): the load where offload's group commit lets concurrent
ledger writes share one sync, while the floor keeps its naive one commit per statement.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench.cases import harness
from bench.cases.baselines import HUEY_WORKERS, Floor, HueyRig
from bench.report.stats import headline, percentile, spread, to_us

TRIVIAL_RESULT = {"status": "completed", "summary": "ok"}
SYSTEMS = ("offload", "floor", "huey")
THREADS = 8  # dispatching threads of the concurrent variant


@dataclass
class SystemRun:
    """One system's round: raw timings in seconds."""

    total_s: float
    cpu_s: float
    dispatch_s: list[float]
    completion_s: list[float] = field(default_factory=list)
    completed: int = 0

    def figures(self, n: int) -> dict[str, float]:
        return {"wall_per_delegation_us": to_us(self.total_s / n), "delegations_per_s": n / self.total_s,
                "cpu_per_delegation_us": to_us(self.cpu_s / n),
                "dispatch_p50_us": to_us(percentile(self.dispatch_s, 50)),
                "dispatch_p99_us": to_us(percentile(self.dispatch_s, 99)),
                "completion_p50_us": to_us(percentile(self.completion_s, 50)),
                "completion_p99_us": to_us(percentile(self.completion_s, 99)),
                "completed": float(self.completed)}


def _stamping_runners(n: int) -> tuple[list[float], list[Callable[[], dict]]]:
    returned_at = [0.0] * n

    def make(i: int) -> Callable[[], dict]:
        def run() -> dict:
            returned_at[i] = time.perf_counter()
            return dict(TRIVIAL_RESULT)
        return run
    return returned_at, [make(i) for i in range(n)]


def _finish(n: int, t0: float, cpu0: float, dispatch_s: list[float], returned_at: list[float],
            arrived_at: dict[int, float]) -> SystemRun:
    cpu_s = time.process_time() - cpu0
    end = max(arrived_at.values()) if arrived_at else time.perf_counter()
    completion = [arrived_at[i] - returned_at[i] for i in arrived_at if returned_at[i]]
    return SystemRun(end - t0, cpu_s, dispatch_s, completion, completed=len(arrived_at))


def _dispatch_all(n: int, threads: int, submit: Callable[[int], Any]) -> list[float]:
    """Call ``submit(i)`` for every i from ``threads`` threads (1: this one); each call's latency."""
    dispatch_s = [0.0] * n

    def dispatch(indexes: range) -> None:
        for i in indexes:
            start = time.perf_counter()
            submit(i)
            dispatch_s[i] = time.perf_counter() - start
    if threads == 1:
        dispatch(range(n))
        return dispatch_s
    workers = [threading.Thread(target=dispatch, args=(range(k, n, threads),)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return dispatch_s


def run_offload(n: int, root: Path, threads: int = 1, owner_loop: bool = True, warmup: int = 0) -> SystemRun:
    """``owner_loop=False``: without the runtime's owner loop (what it costs is measured).
    ``warmup``: that many delegations run to the end before the clock starts (the ledger's
    tables made, its connections opened: one-time costs a per-delegation figure would
    otherwise spread over ``n``)."""
    harness.reset_engine()
    off = harness.use_home(harness.new_home(root, "offload"), owner_loop=owner_loop)
    if warmup:
        _warm(off, n, warmup)
    returned_at, runners = _stamping_runners(n)
    collector = harness.Collector(off.bus.completion_queue, n, harness.goal_index).start()
    rejected: list[int] = []

    def submit(i: int) -> None:
        if harness.dispatch_unit(i, runners[i], cap=n)["status"] != "dispatched":
            rejected.append(i)
    cpu0, t0 = time.process_time(), time.perf_counter()
    dispatch_s = _dispatch_all(n, threads, submit)
    collector.join(120)
    run = _finish(n, t0, cpu0, dispatch_s, returned_at, collector.arrived_at)
    if rejected:
        raise RuntimeError(f"offload rejected {len(rejected)} of {n} trivial delegations")
    harness.reset_engine()
    return run


def _warm(off: Any, n: int, count: int) -> None:
    """``count`` trivial delegations dispatched and their results taken off the bus (goals
    ``u<n>`` on, so none is mistaken for one of the timed ``n``)."""
    _, runners = _stamping_runners(count)
    collector = harness.Collector(off.bus.completion_queue, count, harness.goal_index).start()
    for i in range(count):
        if harness.dispatch_unit(n + i, runners[i], cap=n + count)["status"] != "dispatched":
            raise RuntimeError(f"offload rejected warm-up delegation {i} of {count}")
    if not collector.join(60) or len(collector.arrived_at) != count:
        raise RuntimeError(f"{count - len(collector.arrived_at)} of {count} warm-up delegations never came back")


def run_floor(n: int, root: Path, threads: int = 1) -> SystemRun:
    home = harness.new_home(root, "floor")
    floor = Floor(harness.make_wal_db(home / "floor.db"))
    returned_at, runners = _stamping_runners(n)
    collector = harness.Collector(floor.done, n, lambda evt: int(evt["goal"][1:])).start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    dispatch_s = _dispatch_all(n, threads, lambda i: floor.submit(runners[i], {"goal": f"u{i}", "context": None,
                                                                                "model": "bench-model"}))
    collector.join(120)
    run = _finish(n, t0, cpu0, dispatch_s, returned_at, collector.arrived_at)
    floor.close()
    return run


def run_huey(n: int, root: Path, threads: int = 1) -> SystemRun:
    home = harness.new_home(root, "huey")
    returned_at = [0.0] * n

    def trivial(i: int) -> dict:
        returned_at[i] = time.perf_counter()
        return dict(TRIVIAL_RESULT)

    rig = HueyRig(home / "huey.db", trivial)
    rig.start()
    handles: queue.Queue = queue.Queue()
    arrived_at: dict[int, float] = {}
    waiter = threading.Thread(target=_wait_huey, args=(rig, handles, n, arrived_at), daemon=True)
    waiter.start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    dispatch_s = _dispatch_all(n, threads, lambda i: handles.put((i, rig.enqueue(i))))
    waiter.join(120)
    run = _finish(n, t0, cpu0, dispatch_s, returned_at, arrived_at)
    rig.stop()
    return run


def _wait_huey(rig: HueyRig, handles: queue.Queue, n: int, arrived_at: dict[int, float]) -> None:
    """Await every result in submission order, as a caller holding the handles would."""
    for _ in range(n):
        i, result = handles.get(timeout=120)
        rig.wait(result)
        arrived_at[i] = time.perf_counter()


RUNNERS: dict[str, Callable[[int, Path], SystemRun]] = {"offload": run_offload, "floor": run_floor, "huey": run_huey}


def run(n: int, rounds: int, root: Path, log: Callable[[str], None] = print, threads: int = THREADS) -> dict[str, Any]:
    threaded = tuple(f"{name}_{threads}t" for name in SYSTEMS)
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in SYSTEMS + threaded}
    for r in range(rounds):
        order = SYSTEMS[r % 3:] + SYSTEMS[:r % 3]
        for name in order:
            per_round[name].append(RUNNERS[name](n, root).figures(n))
        for name in order:
            per_round[f"{name}_{threads}t"].append(RUNNERS[name](n, root, threads).figures(n))
        log(f"  case 1 round {r + 1}/{rounds}: " + ", ".join(
            f"{name} {per_round[name][-1]['wall_per_delegation_us']:.0f} us/deleg" for name in SYSTEMS + threaded))
    return summarize(n, rounds, per_round, threads)


def _series(per_round: dict[str, list[dict[str, float]]], system: str, metric: str) -> list[float]:
    return [figures[metric] for figures in per_round[system]]


def summarize(n: int, rounds: int, per_round: dict[str, list[dict[str, float]]], threads: int) -> dict[str, Any]:
    metrics = {system: {metric: spread(_series(per_round, system, metric)) for metric in per_round[system][0]}
               for system in per_round}
    s = lambda system, metric: _series(per_round, system, metric)  # noqa: E731
    heads = [
        headline("offload / floor: wall time per delegation", s("offload", "wall_per_delegation_us"),
                 s("floor", "wall_per_delegation_us"), target_max=1.5, target="<= 1.5"),
        headline("offload / floor: CPU time per delegation", s("offload", "cpu_per_delegation_us"),
                 s("floor", "cpu_per_delegation_us"), target_max=None, target="(info)"),
        headline(f"offload / floor: wall time per delegation, {threads} dispatching threads",
                 s(f"offload_{threads}t", "wall_per_delegation_us"), s(f"floor_{threads}t", "wall_per_delegation_us"),
                 target_max=0.7, target="<= 0.7 (group commit)"),
        headline(f"offload / huey: wall time per delegation, {threads} dispatching threads",
                 s(f"offload_{threads}t", "wall_per_delegation_us"), s(f"huey_{threads}t", "wall_per_delegation_us"),
                 target_max=1.0, target="< 1"),
        headline("offload / huey: wall time per delegation", s("offload", "wall_per_delegation_us"),
                 s("huey", "wall_per_delegation_us"), target_max=1.0, target="< 1 (ahead of huey)"),
        headline("offload / huey: p50 dispatch latency", s("offload", "dispatch_p50_us"),
                 s("huey", "dispatch_p50_us"), target_max=1.0, target="< 1"),
        headline("offload / huey: p50 completion latency", s("offload", "completion_p50_us"),
                 s("huey", "completion_p50_us"), target_max=1.0, target="< 1"),
        headline("offload / huey: p99 completion latency", s("offload", "completion_p99_us"),
                 s("huey", "completion_p99_us"), target_max=1.0, target="< 1"),
    ]
    return {"case": 1, "title": "per-delegation cost", "params": {"n": n, "rounds": rounds,
            "huey_workers": HUEY_WORKERS, "threads": threads}, "metrics": metrics, "headlines": heads, "skipped": None}
