"""The two things offload's per-delegation cost is compared against (case 1).

``Floor``: a ``ThreadPoolExecutor`` plus the same durable work done by hand — one INSERT at
submit, one UPDATE at completion, in its own WAL database with the same (default) pragmas and
one connection under a lock like the ledger's, then a ``queue.put``. As few lines as possible:
it has none of offload's capacity, routing, recovery or replay.

``HueyRig``: huey's ``SqliteHuey`` on a file with in-process consumer threads — the library a
Python user would pick for durable background tasks. Its poll intervals are set far shorter
than huey's defaults (0.1 s worker backoff start, 0.05 s result poll), in huey's favour.
"""
from __future__ import annotations

import json
import queue
import signal
import sqlite3
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

HUEY_WORKERS = 4
HUEY_WORKER_POLL_S = 0.001  # first sleep of an idle huey worker (huey default 0.1 s)
HUEY_WORKER_MAX_POLL_S = 0.01  # longest sleep of an idle huey worker (huey default 10 s)
HUEY_RESULT_POLL_S = 0.001  # result.get(blocking=True) poll interval (huey default 0.05 s, growing)


class Floor:
    """The floor: a thread pool and two SQL statements per job, by hand."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, state TEXT, task TEXT, event TEXT)")
        self.lock, self.pool, self.done = threading.Lock(), ThreadPoolExecutor(), queue.Queue()

    def submit(self, fn: Callable[[], Any], task: dict[str, Any]) -> str:
        job_id = uuid.uuid4().hex
        with self.lock:
            self.db.execute("INSERT INTO jobs VALUES (?, 'running', ?, NULL)", (job_id, json.dumps(task)))
        self.pool.submit(self._run, job_id, fn, task)
        return job_id

    def _run(self, job_id: str, fn: Callable[[], Any], task: dict[str, Any]) -> None:
        event = {"id": job_id, "goal": task["goal"], "result": fn()}
        with self.lock:
            self.db.execute("UPDATE jobs SET state='done', event=? WHERE id=?", (json.dumps(event), job_id))
        self.done.put(event)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.db.close()


class HueyRig:
    """SqliteHuey with in-process consumer threads, and a waiter that blocks on each result."""

    def __init__(self, path: Path, fn: Callable[[int], Any], workers: int = HUEY_WORKERS) -> None:
        from huey import SqliteHuey  # optional dependency: the bench extra

        self.huey = SqliteHuey(name="bench", filename=str(path), results=True)
        self.task = self.huey.task(name="bench_trivial")(fn)
        self.consumer = self.huey.create_consumer(
            workers=workers, periodic=False, initial_delay=HUEY_WORKER_POLL_S, backoff=1.15,
            max_delay=HUEY_WORKER_MAX_POLL_S, check_worker_health=False)
        self._saved_handlers: dict[int, Any] = {}

    def start(self) -> None:
        # Consumer.start() installs signal handlers; keep ours (Ctrl-C must still stop the bench).
        for signum in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if signum is not None:
                self._saved_handlers[signum] = signal.getsignal(signum)
        self.consumer.start()
        for signum, handler in self._saved_handlers.items():
            signal.signal(signum, handler)

    def enqueue(self, index: int) -> Any:
        return self.task(index)

    @staticmethod
    def wait(result: Any) -> Any:
        return result.get(blocking=True, timeout=120, backoff=1.0, max_delay=HUEY_RESULT_POLL_S)

    def stop(self) -> None:
        self.consumer.stop(graceful=True)
        self.huey.storage.close()
