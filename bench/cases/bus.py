"""The completion bus under many consumers: ``python -m bench.cases.bus [--before]``.

100 session consumers drain one bus while 2,000 events arrive (issue #11 item 3: every event
to its owner exactly once, target under 2 s). Most consumers drain by session key (the
indexed path); every tenth proves ownership with a predicate (a full scan, no requeue); a few
public events go to whoever drains first. ``drain_race`` is the workload the race test runs
too (tests/chaos/test_bus_drain.py), so the figure here and the test's promise are one thing.
``--before`` also times the same workload on a plain ``queue.Queue`` (take all, put back what
is not ours: the drain before the index).
"""
from __future__ import annotations

import argparse
import json
import queue
import threading
import time
from collections import Counter
from typing import Any

from offload.engine.bus import CompletionBus

PUBLIC_EVERY = 100  # one public (unrouted) event per this many


def _event(i: int, n_consumers: int) -> dict[str, Any]:
    if i % PUBLIC_EVERY == PUBLIC_EVERY - 1:
        return {"type": "completion", "id": f"p{i}"}  # any consumer may take it, once
    key = f"s{i % n_consumers}"
    return {"type": "async_delegation", "delegation_id": f"d{i}", "session_key": key,
            "parent_session_id": f"parent-{key}", "status": "completed", "goal": "g", "summary": "ok"}


def drain_race(n_consumers: int = 100, n_events: int = 2000, plain_queue: bool = False,
               deadline_s: float = 600.0) -> dict[str, Any]:
    """Run the race; returns timings and what each consumer got (by event id)."""
    bus = CompletionBus()
    bus._completions_restored = True  # no ledger here: only this workload's events
    bus._sweep_orphans = lambda: None  # type: ignore[method-assign]
    if plain_queue:
        bus.completion_queue = queue.Queue()
    got: dict[str, list[str]] = {f"s{c}": [] for c in range(n_consumers)}
    expected = Counter(e.get("session_key") for e in map(lambda i: _event(i, n_consumers), range(n_events)))
    all_in, changed = threading.Event(), threading.Condition()
    start = threading.Barrier(n_consumers + 1)

    def consume(key: str) -> None:
        by_predicate = int(key[1:]) % 10 == 0
        start.wait()
        stop_at = time.monotonic() + deadline_s
        while time.monotonic() < stop_at:
            if by_predicate:
                batch = bus.drain_notifications(owns_event=lambda e: e.get("parent_session_id") == f"parent-{key}")
            else:
                batch = bus.drain_notifications(session_key=key)
            got[key].extend(str(e.get("delegation_id") or e.get("id")) for e, _ in batch)
            if all_in.is_set() and not batch and len([g for g in got[key] if g.startswith("d")]) >= expected[key]:
                return
            if not batch:
                with changed:
                    changed.wait(0.05)

    threads = [threading.Thread(target=consume, args=(k,), daemon=True) for k in got]
    for t in threads:
        t.start()
    start.wait()
    started = time.perf_counter()
    for i in range(n_events):
        bus.completion_queue.put(_event(i, n_consumers))
        if i % 50 == 49:
            with changed:
                changed.notify_all()
    all_in.set()
    with changed:
        changed.notify_all()
    for t in threads:
        t.join(deadline_s)
    elapsed_s = time.perf_counter() - started
    return {"consumers": n_consumers, "events": n_events, "elapsed_s": round(elapsed_s, 3), "got": got,
            "left": bus.completion_queue.qsize(), "plain_queue": plain_queue}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cases.bus", description=__doc__.splitlines()[0])
    parser.add_argument("--before", action="store_true", help="also time a plain queue.Queue (the old drain)")
    parser.add_argument("--consumers", type=int, default=100)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args(argv)
    runs = [drain_race(args.consumers, args.events)]
    if args.before:
        runs.append(drain_race(args.consumers, args.events, plain_queue=True))
    for run in runs:
        delivered = sum(len(v) for v in run.pop("got").values())
        print(json.dumps({**run, "delivered": delivered, "target_s": 2.0, "met": run["elapsed_s"] < 2.0}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
