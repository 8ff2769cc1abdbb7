"""Isolation: sessions never see each other's results, and the ledger's files stay private.

- Many sessions' completions land interleaved on the one bus while every session's consumer
  drains concurrently (by session key, or by an ``owns_event`` predicate): each consumer gets
  exactly its own events, each once, and each durable claim is won by its owner only.
- After a restart the replayed events are just as separated, and a drain without a filter
  (a brand-new session) adopts none of them.
- Under a wide-open umask, every file the ledger creates -- ``state.db`` and any journal,
  ``-wal`` or ``-shm`` sidecar, sampled while the work runs -- is 0o600, and a home the
  ledger has to create is 0o700.
"""
from __future__ import annotations

import os
import random
import sqlite3
import stat
import threading
import time
from collections import Counter

import pytest

from offload.ledger.sqlite_files import retry_while_locked
from tests.chaos.support import drain_queue, report, scaled, wait_until
from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from offload.home import state_db_path
from tools.process_registry import process_registry

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(120, 900)), pytest.mark.usefixtures("engine")]


def dispatch(session: str, rng: random.Random, parent: str | None = None) -> str:
    delay_s = rng.random() / 50
    if rng.random() < 0.5:
        res = ad.dispatch_async_delegation(
            goal=session, context=None, toolsets=None, role="leaf", model="m", session_key=session,
            parent_session_id=parent, runner=lambda: (time.sleep(delay_s), {"status": "completed", "summary": session})[1],
            max_async_children=10_000)
    else:
        res = ad.dispatch_async_delegation_batch(
            goals=[session, session], context=None, toolsets=None, role="leaf", model="m", session_key=session,
            parent_session_id=parent, max_async_children=10_000,
            runner=lambda: (time.sleep(delay_s), {"results": [{"task_index": 0, "status": "completed",
                                                               "summary": session}]})[1])
    assert res["status"] == "dispatched", res
    return res["delegation_id"]


def sessions(n: int) -> list[str]:
    # Keys that prefix or nearly equal each other, and the gateway's shape.
    base = [f"agent:main:telegram:dm:{i}" for i in range(n // 2)]
    return base + [f"{k}:thread" for k in base[: n - len(base) - 1]] + [base[0] + " "]


def test_interleaved_sessions_each_receive_exactly_their_own(monkeypatch):
    process_registry._completions_restored = True  # only this process's events here
    rng = random.Random(7)
    keys = sessions(scaled(24, 100))
    per_session = scaled(6, 20)
    expected: dict[str, set[str]] = {k: set() for k in keys}
    got: dict[str, Counter] = {k: Counter() for k in keys}
    wrong: list[tuple[str, dict]] = []
    claims: Counter = Counter()
    lock = threading.Lock()
    by_predicate = set(keys[::2])  # half the consumers prove ownership by parent session instead

    def consume(key: str) -> None:
        deadline = time.monotonic() + scaled(60, 600)  # every consumer re-queues the others' events
        while sum(got[key].values()) < per_session and time.monotonic() < deadline:
            if key in by_predicate:
                batch = process_registry.drain_notifications(
                    owns_event=lambda evt, key=key: evt.get("parent_session_id") == f"parent-of-{key}")
            else:
                batch = process_registry.drain_notifications(session_key=key)
            for evt, text in batch:
                claim = ad.claim_event_delivery(evt, f"consumer-{key}")
                with lock:
                    got[key][evt["delegation_id"]] += 1
                    if evt.get("session_key") != key or not text:
                        wrong.append((key, evt))
                    if claim:
                        claims[evt["delegation_id"]] += 1
                if claim:
                    assert ad.complete_event_delivery(evt, claim)
            time.sleep(0.001)

    consumers = [threading.Thread(target=consume, args=(k,)) for k in keys]
    started = time.monotonic()
    for t in consumers:
        t.start()
    for _ in range(per_session):  # interleaved: one unit of every session per round
        for key in rng.sample(keys, len(keys)):
            expected[key].add(dispatch(key, rng, parent=f"parent-of-{key}"))
    for t in consumers:
        t.join(scaled(90, 700))
    assert not wrong, wrong[:3]
    left = [evt["delegation_id"] for evt in drain_queue()]
    assert not left, f"{len(left)} events were never taken by their consumer (still queued, not lost)"
    for key in keys:
        assert got[key] == Counter(expected[key]), f"{key!r} got {got[key]}, expected {sorted(expected[key])}"
    assert set(claims.values()) == {1} and len(claims) == len(keys) * per_session
    report("isolation", sessions=len(keys), events=len(claims), drain_s=round(time.monotonic() - started, 1))


def test_replayed_events_stay_with_their_session_and_a_new_session_adopts_none(monkeypatch):
    rng = random.Random(11)
    keys = sessions(scaled(12, 40))
    expected = {k: {dispatch(k, rng) for _ in range(3)} for k in keys}
    assert wait_until(lambda: ad.active_count() == 0)
    drain_queue()  # this process "crashes" before delivering anything
    ad._reset_for_tests()
    process_registry._completions_restored = False
    monkeypatch.setattr(delivery, "owner_alive", lambda pid, started: False)  # a later process replays

    assert process_registry.drain_notifications() == []  # a new session without a filter adopts nothing
    for key in rng.sample(keys, len(keys)):
        got = [evt for evt, _ in process_registry.drain_notifications(session_key=key)]
        assert all(evt.get("restored") and evt["session_key"] == key for evt in got)
        assert sorted(evt["delegation_id"] for evt in got) == sorted(expected[key])
    assert process_registry.completion_queue.empty()


def _modes(home) -> dict[str, int]:
    modes = {}
    for name in os.listdir(home):
        if name.startswith("state.db"):
            try:
                modes[name] = stat.S_IMODE(os.stat(os.path.join(home, name)).st_mode)
            except FileNotFoundError:
                continue  # a journal that came and went between listing and stat
    return modes


@pytest.mark.sqlite_only
@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_every_ledger_file_is_owner_only_under_a_wide_umask(journal, tmp_path, monkeypatch):
    home = tmp_path / "fresh" / "home"  # the ledger creates it
    monkeypatch.setenv("HERMES_HOME", str(home))
    old_umask = os.umask(0)
    seen: dict[str, set[int]] = {}
    samples = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples[0] += 1
            if home.exists():
                for name, mode in _modes(home).items():
                    seen.setdefault(name, set()).add(mode)
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        first = dispatch("s", random.Random(1))
        assert wait_until(lambda: ad.active_count() == 0)
        if journal == "wal":
            conn = sqlite3.connect(state_db_path())
            # The last finalize may still be pruning the ledger; a journal-mode switch answers
            # "locked" at once instead of waiting, so retry it as the session store does.
            retry_while_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.close()
            delivery.current_ledger().close()  # reopen in WAL: -wal and -shm appear
        sampler.start()
        rng = random.Random(2)
        ids = [dispatch(f"s{i % 3}", rng) for i in range(40)]
        assert wait_until(lambda: ad.active_count() == 0)
        for did in [first, *ids]:
            ad.mark_completion_delivered(did)
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join(5)
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    final = _modes(home)
    assert final["state.db"] == 0o600
    if journal == "wal":
        assert {"state.db-wal", "state.db-shm"} <= set(final)
    loose = {name: sorted(oct(m) for m in modes) for name, modes in seen.items() if modes != {0o600}}
    loose.update({name: [oct(m)] for name, m in final.items() if m != 0o600})
    assert not loose, f"ledger files readable by others: {loose}"
    report("isolation", file_mode_samples=samples[0], ledger_files_seen=len(seen))
