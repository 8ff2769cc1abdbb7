"""Races against the engine's one lock: capacity, interrupts vs finalize, pruning vs listing.

- 64 threads dispatch 10,000 units against a cap of 4 with runners that return at once,
  each thread retrying what the cap refuses: at no instant do more than 4 slots run (sampled
  under the engine lock by a watcher, and counted by the runners themselves); every unit
  reports exactly once, every refusal is the capacity message, and every row ends terminal.
- Interrupts racing finalize: units finishing on their own while other threads interrupt
  all of them, and the stall monitor force-finalizing units whose runners return at the same
  moment: each unit reports exactly once, nothing raises, every slot is freed.
- Pruning racing listing: records are pruned (in memory and in the ledger) while other
  threads list, count and read them: nothing raises, a live unit is never pruned, an
  undelivered row is never pruned.
"""
from __future__ import annotations

import queue
import random
import sqlite3
import threading
import time
from collections import Counter

import pytest

from tests.chaos.support import drain_queue, report, scaled, wait_until
from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from tests.postgres_support import pg_ledger_rows
from offload.home import state_db_path
from tools.process_registry import process_registry

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(240, 1200)), pytest.mark.usefixtures("engine")]


def use_wal() -> None:
    """The session store owns the journal mode; production runs WAL. Set it before the engine opens."""
    if pg_ledger_rows("1") is not None:
        return  # the ledger is in PostgreSQL this run
    conn = sqlite3.connect(state_db_path())
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()


def rows_by_state() -> Counter:
    pg = pg_ledger_rows("state")
    if pg is not None:
        return Counter(state for (state,) in pg)
    conn = sqlite3.connect(state_db_path())
    try:
        return Counter(state for (state,) in conn.execute("SELECT state FROM async_delegations"))
    finally:
        conn.close()


class Watch:
    """Samples the engine's slot count under its lock until stopped."""

    def __init__(self, cap: int) -> None:
        self.cap, self.max_seen, self.samples = cap, 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            time.sleep(0.0001)  # sample every ~0.1 ms without starving the workers of the GIL
            with ad._records_lock:
                slots = len(ad._active_slots)
                active = {r["slot_key"] for r in ad._records.values() if r["status"] in ad._ACTIVE_STATES}
            self.max_seen = max(self.max_seen, slots, len(active))
            self.samples += 1

    def __enter__(self) -> "Watch":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)


def test_64_threads_never_run_more_units_than_the_cap():
    use_wal()
    cap, n_threads, units = 4, 64, scaled(10_000, 10_000)
    running, max_running, lock = [0], [0], threading.Lock()
    accepted: list[str] = []
    refusals: Counter = Counter()
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)
    freed = threading.Condition()
    events: Counter = Counter()
    consuming = threading.Event()

    def consumer() -> None:
        while not consuming.is_set() or not process_registry.completion_queue.empty():
            try:
                evt = process_registry.completion_queue.get(timeout=0.05)
            except queue.Empty:
                continue
            events[evt["delegation_id"]] += 1
            with freed:
                freed.notify(8)  # a handful of contenders per freed slot

    def runner() -> dict:
        with lock:
            running[0] += 1
            max_running[0] = max(max_running[0], running[0])
        time.sleep(random.random() / 5000)
        with lock:
            running[0] -= 1
        return {"status": "completed", "summary": "ok"}

    def worker(count: int) -> None:
        mine, refused = [], Counter()
        try:
            barrier.wait(30)
            while len(mine) < count:
                res = ad.dispatch_async_delegation(goal="g", context=None, toolsets=None, role="leaf", model="m",
                                                   session_key="s", runner=runner, max_async_children=cap)
                if res["status"] == "dispatched":
                    mine.append(res["delegation_id"])
                else:
                    refused[res["error"].split(" (")[0]] += 1
                    # Wait for a finished unit, then race the others for its slot; 64 threads
                    # spinning instead would starve the workers of the GIL.
                    with freed:
                        freed.wait(0.02)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        with lock:
            accepted.extend(mine)
            refusals.update(refused)

    share = [units // n_threads + (1 if i < units % n_threads else 0) for i in range(n_threads)]
    started = time.monotonic()
    draining = threading.Thread(target=consumer, daemon=True)
    draining.start()
    with Watch(cap) as watch:
        threads = [threading.Thread(target=worker, args=(k,)) for k in share]
        for t in threads:
            t.start()
        for t in threads:
            t.join(scaled(200, 900))
        assert wait_until(lambda: ad.active_count() == 0, timeout_s=30)
    elapsed = time.monotonic() - started
    consuming.set()
    draining.join(10)

    assert not errors, errors[:3]
    assert len(accepted) == units
    assert set(refusals) <= {"Async delegation capacity reached"}, refusals
    assert max_running[0] <= cap and watch.max_seen <= cap
    assert not ad._active_slots
    assert events == Counter(accepted), "a unit reported zero or several times"
    assert rows_by_state() == Counter({"completed": units})
    report("races", units=units, threads=n_threads, cap=cap, refusals=sum(refusals.values()),
           max_concurrent=max(max_running[0], watch.max_seen), slot_samples=watch.samples,
           dispatch_s=round(elapsed, 1))


def test_later_units_of_an_admitted_call_are_never_refused_at_capacity(monkeypatch):
    """Grouped calls through delegate_task racing for a small cap: a call is either wholly in
    the background or wholly synchronous (at capacity); a later unit never runs inline."""
    import json

    import tools.delegate_tool as dt
    from tests.delegate.fakes import FakeParent

    use_wal()
    monkeypatch.setattr(dt, "_load_config", lambda: {"independent_completions": True, "max_concurrent_children": 4,
                                                     "at_capacity": "inline"})
    outcomes: Counter = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(scaled(40, 200)):
                tasks = [{"goal": f"race task {i}", **({"group": rng.choice("ab")} if rng.random() < 0.5 else {})}
                         for i in range(rng.randint(2, 4))]
                out = json.loads(dt.delegate_task(tasks=tasks, background=True, parent_agent=FakeParent()))
                kind = out.get("mode")
                if out.get("inline_results"):
                    kind = "inline"
                with lock:
                    outcomes[kind] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert wait_until(lambda: ad.active_count() == 0, timeout_s=30)
    drain_queue()
    assert not errors, errors[:3]
    assert outcomes["background"] and set(outcomes) <= {"background", "sync"}, outcomes
    report("races", grouped_calls=sum(outcomes.values()), grouped_background=outcomes["background"])


def test_interrupt_all_racing_finalize_reports_every_unit_once():
    use_wal()
    n = scaled(300, 2000)
    stops = {}
    dispatched = []
    gate = threading.Event()

    def make(i: int):
        stop = threading.Event()

        def runner() -> dict:
            gate.wait(10)
            interrupted = stop.wait(random.random() / 20) if i % 2 else False
            return {"status": "interrupted" if interrupted else "completed", "summary": str(i)}

        return stop, runner

    for i in range(n):
        stop, runner = make(i)
        res = ad.dispatch_async_delegation(goal=str(i), context=None, toolsets=None, role="leaf", model="m",
                                           session_key=f"s{i % 7}", runner=runner, interrupt_fn=stop.set,
                                           max_async_children=n)
        assert res["status"] == "dispatched"
        stops[res["delegation_id"]] = stop
        dispatched.append(res["delegation_id"])
    errors: list[BaseException] = []
    signalled = Counter()
    done = threading.Event()

    def interrupter(k: int) -> None:
        try:
            while not done.is_set():
                got = ad.interrupt_all("race") if k % 2 else ad.interrupt_for_session(session_key=f"s{k % 7}")
                assert isinstance(got, int) and 0 <= got <= n
                signalled[k] += got
                time.sleep(random.random() / 50)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=interrupter, args=(k,)) for k in range(6)]
    gate.set()  # even units finish at once, odd ones within 50 ms unless interrupted first
    for t in threads:
        t.start()
    assert wait_until(lambda: ad.active_count() == 0, timeout_s=60)
    done.set()
    for t in threads:
        t.join(10)
    assert not errors, errors[:3]
    events = drain_queue()
    assert Counter(e["delegation_id"] for e in events) == Counter(dispatched)
    assert {e["status"] for e in events} <= {"completed", "interrupted"}
    assert not ad._active_slots
    report("races", interrupt_units=n, interrupted=sum(e["status"] == "interrupted" for e in events))


def test_forced_stall_racing_the_late_return_finalizes_once(monkeypatch):
    use_wal()
    monkeypatch.setattr(ad, "_STALE_CHECK_INTERVAL", 3600.0)  # we drive the sweeps ourselves
    n = scaled(200, 1000)
    gate, started = threading.Event(), threading.Semaphore(0)

    def runner() -> dict:
        started.release()
        gate.wait(10)
        time.sleep(random.choice((0, random.random() / 5)))  # spread the late returns across the forced finalizes
        return {"status": "completed", "summary": "late"}

    ids = []
    for _ in range(n):
        res = ad.dispatch_async_delegation(goal="g", context=None, toolsets=None, role="leaf", model="m",
                                           session_key="s", runner=runner, max_async_children=n,
                                           progress_fn=lambda: (("same",), False))
        ids.append(res["delegation_id"])
    for _ in range(n):
        assert started.acquire(timeout=10)
    now = time.monotonic()
    ad._check_stalls(now)
    ad._check_stalls(now + ad._STALE_IDLE_SECONDS + 1)
    assert all(d["status"] == "stalling" for d in ad.list_async_delegations())
    force = threading.Thread(target=ad._check_stalls, args=(now + ad._STALE_IDLE_SECONDS + 2 + ad._STALL_GRACE_SECONDS,))
    force.start()
    gate.set()  # the runners return while the monitor forces them
    force.join(30)
    assert wait_until(lambda: ad.active_count() == 0, timeout_s=30)
    events = drain_queue()
    assert Counter(e["delegation_id"] for e in events) == Counter(ids)
    statuses = Counter(e["status"] for e in events)
    assert set(statuses) <= {"stalled", "completed"}
    assert not ad._active_slots
    report("races", stall_race_units=n, stalled=statuses["stalled"], late_completed=statuses["completed"])


def test_pruning_racing_listing_never_drops_live_or_undelivered_work(monkeypatch):
    use_wal()
    monkeypatch.setattr(ad, "_MAX_RETAINED_COMPLETED", 5)
    monkeypatch.setattr(ad, "_DURABLE_PRUNE_INTERVAL_S", 0.0)
    monkeypatch.setattr(ad, "_MAX_RETAINED_SETTLED", 5)
    n = scaled(400, 3000)
    hold = threading.Event()
    live = ad.dispatch_async_delegation_batch(
        goals=["a", "b"], context=None, toolsets=None, role="leaf", model="m", session_key="live",
        runner=lambda: (hold.wait(60), {"results": [{"task_index": 0, "status": "completed"}]})[1],
        max_async_children=64)["delegation_id"]
    errors: list[BaseException] = []
    done = threading.Event()
    acked: set[str] = set()

    def lister() -> None:
        try:
            while not done.is_set():
                items = ad.list_async_delegations()
                ids = [i["delegation_id"] for i in items]
                assert len(ids) == len(set(ids))
                assert live in ids, "a live unit was pruned"
                assert ad.active_count() >= 1 and ad.active_task_count() >= 1
                assert ad.has_live_for_session(session_key="live")
                assert ad.get_durable_delegation(live)["state"] == "running"
        except BaseException as exc:
            errors.append(exc)

    def consumer() -> None:  # acknowledges what it sees, so the ledger has settled rows to prune
        try:
            while not done.is_set():
                for evt in drain_queue():
                    if int(evt["goal"]) % 2 == 0:
                        ad.mark_completion_delivered(evt["delegation_id"])
                        acked.add(evt["delegation_id"])
                time.sleep(0.001)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=lister) for _ in range(4)] + [threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    ids = []
    for i in range(n):
        res = ad.dispatch_async_delegation(goal=str(i), context=None, toolsets=None, role="leaf", model="m",
                                           session_key="s", runner=lambda: {"status": "completed"},
                                           max_async_children=64)
        if res["status"] == "dispatched":
            ids.append(res["delegation_id"])
    assert wait_until(lambda: ad.active_count() == 1, timeout_s=60)
    time.sleep(0.05)
    done.set()
    for t in threads:
        t.join(20)
    hold.set()
    assert wait_until(lambda: ad.active_count() == 0, timeout_s=30)
    assert not errors, errors[:3]
    assert len([r for r in ad._records.values() if r["status"] not in ad._LIVE_STATES]) <= 5
    for did in ids:  # every unit nobody acknowledged is still in the ledger, pending
        if did not in acked:
            row = ad.get_durable_delegation(did)
            assert row is not None and row["delivery_state"] == "pending", did
    report("races", prune_units=len(ids), acked=len(acked))
