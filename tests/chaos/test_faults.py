"""Disk and database faults while units run.

Every scenario runs the same four units around a fault:

- ``C`` finishes before the fault (a terminal, undelivered row);
- ``A`` is dispatched and records its first child before the fault, and finishes during it;
- ``B`` is dispatched and finishes during the fault;
- ``D`` is dispatched during the fault and finishes after it cleared.

In every fault: workers survive (B finishes; a unit after the fault runs), every event is
delivered in memory, slots are freed, exactly one clear ERROR is logged by
``tools.async_delegation`` (the log-once rule, not a storm), and the next healthy start (a
fresh engine whose previous owner is gone) recovers what was durably recorded: ``C`` with its
real result, ``A`` as ``unknown`` keeping its recorded child, ``D`` with its real result
(its terminal write is an upsert), and nothing for ``B``.

Simulations (tests run as root, so chmod cannot make anything read-only for us):
- locked: another process holds ``BEGIN EXCLUSIVE`` past a 0.2 s busy timeout;
- full: the engine's connection gets ``PRAGMA max_page_count`` = its current page count;
- read-only database: the engine's connection is opened ``mode=ro`` (what SQLite does on a
  read-only file or mount);
- unwritable home: ``$HERMES_HOME`` sits under a path component that is a regular file, so
  nothing can be created there (what a missing mount or a file in the way looks like);
- garbage: ``state.db`` is replaced by (or overwritten in place with) random bytes; the fault
  clears when the operator puts the last good copy back, or moves the garbage aside;
- deleted: ``state.db`` is unlinked while units run.
"""
from __future__ import annotations

import logging
import os
import queue
import shutil
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import offload.ledger.sqlite as sq
import offload.ledger.sqlite_files as sqlite_files
from tests.chaos.support import drain_queue, engine_errors, report, wait_until
from tests.engine.conftest import wait_event
from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from offload.home import state_db_path

# Faults of the state.db file (locks, full disk, garbage, deletion); PostgreSQL faults are in tests/postgres.
pytestmark = [pytest.mark.chaos, pytest.mark.sqlite_only, pytest.mark.timeout(60), pytest.mark.usefixtures("engine")]

BIG = "x" * 20_000  # rows that need new pages, so a capped database is really full


@dataclass
class Unit:
    did: str
    gate: threading.Event = field(default_factory=threading.Event)
    recorded: threading.Event = field(default_factory=threading.Event)
    handle: dict = field(default_factory=dict)


def _entry(did: str, i: int) -> dict:
    return {"task_index": i, "status": "completed", "summary": f"real:{did}:{i}:{BIG[:50]}", "api_calls": 1}


def dispatch(did: str, *, record_first: bool = True, gate: bool = True) -> Unit:
    unit = Unit(did)
    if not gate:
        unit.gate.set()

    def runner() -> dict:
        if record_first:
            ad.record_unit_child(did, _entry(did, 0))
        unit.recorded.set()
        unit.gate.wait(30)
        return {"results": [_entry(did, 0), _entry(did, 1)], "total_duration_seconds": 0.1}

    unit.handle = ad.dispatch_async_delegation_batch(
        goals=["first", "second"], context=BIG, toolsets=None, role="leaf", model="m", session_key="agent:main:x:dm:1",
        runner=runner, delegation_id=did, max_async_children=8)
    assert unit.handle["status"] == "dispatched", unit.handle
    assert unit.recorded.wait(10)
    return unit


def finish(unit: Unit) -> dict:
    unit.gate.set()
    return wait_event(unit.did)


def assert_real(evt: dict, did: str) -> None:
    assert evt["status"] == "completed", evt
    assert [r["summary"] for r in evt["results"]] == [_entry(did, 0)["summary"], _entry(did, 1)["summary"]]


def healthy_restart(monkeypatch) -> dict[str, dict]:
    """A fresh engine after the fault cleared; the owner of every old row is gone."""
    ad._reset_for_tests()
    drain_queue()
    monkeypatch.setattr(delivery, "owner_alive", lambda pid, started: False)
    q: queue.Queue = queue.Queue()
    count = ad.restore_undelivered_completions(q)
    events = {}
    while not q.empty():
        evt = q.get_nowait()
        assert evt["delegation_id"] not in events, "a unit was replayed twice"
        events[evt["delegation_id"]] = evt
    assert count == len(events)
    return events


def reopen_ledger() -> None:
    """Drop the engine's connection so the next use opens the file again (as after a fault)."""
    delivery.current_ledger().close()


# -- fault simulations ------------------------------------------------------------------------
class Fault:
    name = "fault"
    recovers = {"C": "real", "A": "unknown", "B": None, "D": "real"}

    def start(self, tmp_path: Path, monkeypatch) -> None: ...

    def clear(self, tmp_path: Path, monkeypatch) -> None: ...


class Locked(Fault):
    name = "locked"

    def start(self, tmp_path, monkeypatch):
        monkeypatch.setattr(sqlite_files, "BUSY_TIMEOUT_S", 0.2)
        reopen_ledger()  # the busy timeout is a property of the connection
        code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
                "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()")
        self.holder = subprocess.Popen([sys.executable, "-c", code, str(state_db_path())], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
        assert self.holder.stdout.readline().strip() == "locked"

    def clear(self, tmp_path, monkeypatch):
        self.holder.stdin.close()
        self.holder.wait(10)


class Full(Fault):
    name = "full"

    def start(self, tmp_path, monkeypatch):
        real_open = sq.open_connection

        def capped(path):
            conn = real_open(path)
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count={pages}")
            return conn

        monkeypatch.setattr(sq, "open_connection", capped)
        self.undo = lambda: monkeypatch.setattr(sq, "open_connection", real_open)
        reopen_ledger()

    def clear(self, tmp_path, monkeypatch):
        self.undo()
        reopen_ledger()


class ReadOnlyDatabase(Fault):
    name = "read-only database"

    def start(self, tmp_path, monkeypatch):
        real_open = sq.open_connection

        def read_only(path):
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
            conn.execute("SELECT count(*) FROM async_delegations").fetchone()
            return conn

        monkeypatch.setattr(sq, "open_connection", read_only)
        self.undo = lambda: monkeypatch.setattr(sq, "open_connection", real_open)
        reopen_ledger()

    def clear(self, tmp_path, monkeypatch):
        self.undo()
        reopen_ledger()


class Garbage(Fault):
    name = "garbage (replaced)"
    in_place = False

    def start(self, tmp_path, monkeypatch):
        path = state_db_path()
        self.backup = tmp_path / "state.db.backup"
        shutil.copyfile(path, self.backup)  # the operator's last good copy
        junk = os.urandom(64 * 1024)
        if self.in_place:
            with open(path, "r+b") as f:
                f.write(junk)
        else:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(junk)
            os.replace(tmp, path)

    def clear(self, tmp_path, monkeypatch):
        os.replace(self.backup, state_db_path())


class GarbageInPlace(Garbage):
    name = "garbage (overwritten in place)"
    in_place = True


class Deleted(Fault):
    name = "deleted"
    # The old file is gone with C's row and A's child record; every terminal write after the
    # deletion lands in a fresh ledger, so A, B and D come back with their real results.
    recovers = {"C": None, "A": "real", "B": "real", "D": "real"}

    def start(self, tmp_path, monkeypatch):
        os.unlink(state_db_path())


FAULTS = [Locked(), Full(), ReadOnlyDatabase(), Garbage(), GarbageInPlace(), Deleted()]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_a_fault_costs_durability_only_and_the_next_start_recovers(fault, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="offload.engine")
    dispatch("C", gate=False)
    assert_real(wait_event("C"), "C")
    a = dispatch("A")

    fault.start(tmp_path, monkeypatch)
    b = dispatch("B")
    assert_real(finish(b), "B")  # delivered in memory; the worker survived the failing writes
    assert_real(finish(a), "A")
    d = dispatch("D")
    errors_during_fault = engine_errors(caplog)
    fault.clear(tmp_path, monkeypatch)
    assert_real(finish(d), "D")

    assert wait_until(lambda: ad.active_count() == 0)
    assert not ad._active_slots, "a slot was not freed"
    assert len(errors_during_fault) == 1, [r.getMessage() for r in errors_during_fault]
    assert str(state_db_path()) in errors_during_fault[0].getMessage()
    assert len(engine_errors(caplog)) == 1, "the fault was logged again after it cleared"
    after = dispatch("E", gate=False)  # the pool still runs new work
    assert_real(wait_event(after.did), "E")

    recovered = healthy_restart(monkeypatch)
    expected = {k: v for k, v in fault.recovers.items() if v} | {"E": "real"}
    assert {k: ("unknown" if e["status"] == "unknown" else "real") for k, e in recovered.items()} == expected
    for did, evt in recovered.items():
        if evt["status"] == "unknown":
            kept = [r for r in evt["results"] if r["status"] != "unknown"]
            assert kept == [_entry(did, 0)], "the child recorded before the fault lost its result"
        else:
            assert_real(evt, did)
    report("faults", scenarios=1, errors_logged=len(errors_during_fault), recovered=len(recovered))


def test_unwritable_home_runs_in_memory_and_the_next_start_uses_the_repaired_home(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="offload.engine")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file where a directory should be")
    monkeypatch.setenv("HERMES_HOME", str(blocker / "home"))

    units = [dispatch(f"U{i}") for i in range(3)]
    assert all("not recorded durably" in u.handle.get("warning", "") for u in units)
    for unit in units:
        assert_real(finish(unit), unit.did)
    assert wait_until(lambda: ad.active_count() == 0) and not ad._active_slots
    errors = engine_errors(caplog)
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert str(blocker / "home" / "state.db") in errors[0].getMessage()

    q: queue.Queue = queue.Queue()
    assert ad.restore_undelivered_completions(q) == 0  # replay never creates a ledger

    blocker.unlink()  # the operator repairs the home
    (blocker / "home").mkdir(parents=True)
    late = dispatch("late", gate=False)
    assert_real(wait_event(late.did), "late")
    assert set(healthy_restart(monkeypatch)) == {"late"}
    assert len(engine_errors(caplog)) == 1


def test_restore_over_a_garbage_ledger_is_logged_once_and_never_raises(caplog):
    caplog.set_level(logging.DEBUG)
    state_db_path().write_bytes(os.urandom(8192))
    from tools.process_registry import process_registry

    for _ in range(3):
        assert process_registry.drain_notifications(session_key="s") == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "state.db" in errors[0].getMessage()


def test_moving_a_garbage_ledger_aside_as_the_error_says_starts_a_fresh_one(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="offload.engine")
    state_db_path().write_bytes(os.urandom(8192))
    unit = dispatch("G", gate=False)
    assert "not recorded durably" in unit.handle["warning"]
    assert_real(wait_event("G"), "G")
    (message,) = [r.getMessage() for r in engine_errors(caplog)]
    assert f"mv {state_db_path()} {state_db_path()}.corrupt" in message
    os.replace(state_db_path(), f"{state_db_path()}.corrupt")
    after = dispatch("H", gate=False)
    assert "warning" not in after.handle
    assert_real(wait_event("H"), "H")
    assert set(healthy_restart(monkeypatch)) == {"H"}
