"""What the owner loop (``offload.owner.loop``: control requests + activity snapshots) costs.

1. Case 1's offload run (N trivial delegations, dispatched and awaited) without and with the
   owner loop (as every ``offload.Offload`` has it), modes alternating per round:
   wall and CPU per delegation. The loop is off the dispatch path; this shows it.
2. One loop step on a SQLite ledger, per call: the control poll with nothing requested, an
   activity publish of ``--units`` live units when nothing changed (no write), and when every
   unit changed (one batched write).

    python -m bench.probes.owner_loop_cost [--n 2000] [--rounds 5] [--units 50]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.cases.cost import run_offload
from offload.owner import activity, control_requests
from offload.engine.engine import Delegations
from offload.ledger import open_ledger

MODES = ("off", "owner_loop")


def _run(mode: str, n: int, root: Path) -> tuple[float, float]:
    root.mkdir(parents=True, exist_ok=True)
    run = run_offload(n, root, owner_loop=mode == "owner_loop")
    return run.total_s / n * 1e6, run.cpu_s / n * 1e6


def _per_call_us(fn, calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - started) / calls * 1e6


def _items(units: int, tool: str) -> list[dict]:
    return [{"delegation_id": f"deleg_{u:04d}", "status": "running", "seconds_since_progress": 1.0,
             "children_activity": [{"api_calls": 3, "current_tool": tool, "seconds_since_activity": 1.0}] * 3}
            for u in range(units)]


def loop_step(units: int, root: Path) -> dict[str, float]:
    ledger = open_ledger(root / "state.db")
    ledger.request_control("deleg_none", "interrupt", 0.0, 1.0)  # creates the tables; expired at once
    ledger.take_control(["deleg_x"], time.time())
    publisher = activity.Publisher()
    engine = Delegations(ledger=lambda: ledger, publish=lambda evt: None)
    now = time.time()
    publisher.publish(ledger, _items(units, "web"), now)
    figures = {
        "control poll, nothing requested": _per_call_us(
            lambda i: control_requests.act_on_requests(engine, ledger, now, owned=["deleg_0001"]), 500),
        f"publish {units} units, unchanged": _per_call_us(lambda i: publisher.publish(ledger, _items(units, "web"), now),
                                                          200),
        f"publish {units} units, all changed": _per_call_us(
            lambda i: publisher.publish(ledger, _items(units, ("a", "b")[i % 2]), now), 100),
    }
    ledger.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--units", type=int, default=50)
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            for mode in (MODES if round_no % 2 == 0 else MODES[::-1]):
                figures[mode].append(_run(mode, args.n, Path(tmp) / f"{mode}-{round_no}"))
        steps = loop_step(args.units, Path(tmp) / "step")
    print(f"case 1: {args.n} delegations x {args.rounds} rounds, load average {os.getloadavg()[0]:.2f}")
    off_wall, off_cpu = (statistics.median(f[k] for f in figures["off"]) for k in (0, 1))
    for mode in MODES:
        wall, cpu = (statistics.median(f[k] for f in figures[mode]) for k in (0, 1))
        print(f"  {mode:10s} wall {wall:7.1f} us/delegation ({wall / off_wall:.3f}x off)  cpu {cpu:7.1f} us "
              f"({cpu - off_cpu:+.1f} us)")
    print("one owner-loop step (SQLite):")
    for name, us in steps.items():
        print(f"  {name:36s} {us:9.1f} us")


if __name__ == "__main__":
    main()
