"""Fixtures for restore/replay/recovery tests: a fresh delivery state per test, a pid that is
certainly dead, a seeder that writes ledger rows the way a previous process would have, and
helpers to run fresh interpreters against this worktree."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import tools.async_delegation_delivery as delivery
from offload.ledger import DispatchRow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_delivery_state():
    """Close cached ledgers and forget reported errors, before and after each test."""
    delivery.reset_for_tests()
    yield
    delivery.reset_for_tests()


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def seed(dead_pid) -> Callable[..., str]:
    """Write one row into the current home's ledger as a previous process left it.

    ``goals`` makes it a batch unit; ``children`` are child entries recorded while it ran;
    ``completed_at`` makes it terminal (pending delivery) with a stored event.
    """
    def write(delegation_id: str, *, owner_pid: int | None = None, owner_started_at: int | None = None,
              goals: list[str] | None = None, children: tuple[dict[str, Any], ...] = (),
              completed_at: float | None = None, dispatched_at: float | None = None,
              session_key: str = "agent:main:telegram:dm:42", status: str = "completed",
              task_extra: dict[str, Any] | None = None) -> str:
        ledger = delivery.current_ledger()
        dispatched_at = time.time() - 60 if dispatched_at is None else dispatched_at
        task: dict[str, Any] = {"goal": goals[0] if goals else f"goal of {delegation_id}", "context": None,
                                "toolsets": None, "role": "leaf", "model": "m", "is_batch": bool(goals),
                                "owner_cwd": str(REPO / "no-such-dir")}  # no git probe
        if goals:
            task["goals"] = goals
        task.update(task_extra or {})
        row = DispatchRow(delegation_id, session_key, dispatched_at, task, "ui-1", "", "parent-1",
                          dead_pid if owner_pid is None else owner_pid, owner_started_at)
        ledger.persist_dispatch(row, dispatched_at)
        for child in children:
            assert ledger.record_unit_child(delegation_id, child, dispatched_at + 1)
        if completed_at is not None:
            event = {"type": "async_delegation", "delegation_id": delegation_id, "status": status,
                     "session_key": session_key, "origin_ui_session_id": "ui-1", "parent_session_id": "parent-1",
                     "goal": task["goal"], "summary": f"summary of {delegation_id}", "dispatched_at": dispatched_at,
                     "completed_at": completed_at}
            ledger.persist_completion(row, event, {"status": status, "summary": event["summary"]}, completed_at)
        return delegation_id

    return write


@pytest.fixture
def notifications_stub(monkeypatch) -> None:
    """A stand-in renderer of the hermes bus, so drain tests exercise ownership rules, not text."""
    import tools.process_registry_notifications as prn

    monkeypatch.setattr(prn, "format_process_notification",
                        lambda evt: f"[{evt.get('type')}] {evt.get('delegation_id', '')}")


def _child_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HERMES_HOME=str(home), PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **extra)
    return env


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


@pytest.fixture
def child_env() -> Callable[..., dict[str, str]]:
    """Environment of a fresh interpreter: this worktree importable, ``home`` as HERMES_HOME."""
    return _child_env


@pytest.fixture
def wait_for() -> Callable[..., None]:
    """Poll a predicate until it holds; fail naming what was awaited after a deadline."""
    return _wait_for


@pytest.fixture
def run_python(tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """Run a fresh interpreter on ``code`` with this worktree importable and ``home`` as HERMES_HOME."""
    def run(code: str, home: Path, *args: str, timeout_s: float = 30, **env: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=_child_env(home, **env),
                              text=True, capture_output=True, timeout=timeout_s)
        assert done.returncode == 0, f"subprocess failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done

    return run
