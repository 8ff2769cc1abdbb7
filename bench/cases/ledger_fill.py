"""Pre-filled ledgers for case 3: many terminal rows written in one transaction, through the
ledger's own schema and insert statement (so the bench holds no SQL of its own).

Rows look like real ones: a task, an event with a few-hundred-character summary and a result,
owned by a process that has exited (so replay treats them as a previous run's).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from offload.ledger import sqlite_rows as sqlite_ledger
from offload.ledger.codec import dumps
from offload.ledger.sqlite_files import open_connection

SUMMARY = ("The subagent read the module, found the off-by-one in the pager and fixed it; "
           "tests pass. ") * 3


def dead_pid() -> int:
    """The pid of a process that has exited, as a crashed owner would leave behind."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _row(i: int, now: float, delivery_state: str, owner_pid: int) -> tuple[Any, ...]:
    did = f"deleg_fill{i:08d}"
    dispatched, completed = now - 3600 + i * 1e-3, now - 1800 + i * 1e-3
    task = {"goal": f"fix bug #{i}", "context": "in the pager module", "toolsets": ["terminal", "file"],
            "role": "leaf", "model": "bench-model", "is_batch": False, "owner_cwd": "/srv/project"}
    event = {"type": "async_delegation", "delegation_id": did, "session_key": "bench:session",
             "origin_ui_session_id": "", "origin_session_id": "", "parent_session_id": None, **task,
             "dispatched_at": dispatched, "completed_at": completed, "status": "completed",
             "summary": SUMMARY, "error": None, "api_calls": 7, "duration_seconds": 42.0}
    result = {"status": "completed", "summary": SUMMARY, "api_calls": 7, "duration_seconds": 42.0}
    values = {"delegation_id": did, "origin_session": "bench:session", "origin_ui_session_id": "",
              "origin_session_id": "", "parent_session_id": None, "state": "completed",
              "dispatched_at": dispatched, "completed_at": completed, "updated_at": completed,
              "task_json": dumps(task), "event_json": dumps(event), "result_json": dumps(result),
              "delivery_state": delivery_state, "delivery_attempts": 0, "owner_pid": owner_pid,
              "owner_started_at": None, "owner_epoch": 0}
    return tuple(values[name] for name in sqlite_ledger._UPSERT_COLUMNS)


def fill(path: Path, rows: int, *, delivery_state: str, owner_pid: int | None = None,
         now: float | None = None) -> Path:
    """Add ``rows`` terminal rows to the ledger at ``path`` (schema created if needed)."""
    now = time.time() if now is None else now
    pid = dead_pid() if owner_pid is None else owner_pid
    conn = open_connection(path)
    try:
        conn.execute("BEGIN")
        conn.executemany(sqlite_ledger._INSERT_DISPATCH, _rows(rows, now, delivery_state, pid))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # self-contained file: copies need no -wal
    finally:
        conn.close()
    return path


def _rows(count: int, now: float, delivery_state: str, pid: int) -> Iterator[tuple[Any, ...]]:
    for i in range(count):
        yield _row(i, now, delivery_state, pid)
