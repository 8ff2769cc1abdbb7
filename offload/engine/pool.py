"""The daemon worker pool that runs delegation units (threads named ``async-delegate-N``).

Why not ``ThreadPoolExecutor``: its workers are joined at interpreter exit, so one wedged
child would hang the parent's shutdown, and it cannot grow. Here workers are daemon threads,
the pool grows in place (``ensure_workers``) and never shrinks, and a new thread is started
only when no idle worker can take the job, so a queued unit never waits behind a full pool
when the engine sized it by live units.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable

logger = logging.getLogger(__name__)
_names = itertools.count(1)


class DaemonThreadPool:
    def __init__(self, max_workers: int, thread_name_prefix: str = "async-delegate") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._jobs: queue.SimpleQueue[tuple[Future | None, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    @property
    def max_workers(self) -> int:
        return self._max_workers

    def ensure_workers(self, max_workers: int) -> None:
        """Grow the ceiling to ``max_workers`` (never shrinks)."""
        with self._lock:
            self._max_workers = max(self._max_workers, max_workers)

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._queue(future, fn)
        return future

    def start(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` with nobody waiting for it: no ``Future`` (a Condition, two lock rounds
        and a notify per job). An exception ``fn`` lets out is logged."""
        self._queue(None, fn)

    def _queue(self, future: Future | None, fn: Callable[[], Any]) -> None:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after the delegation pool was shut down")
            self._jobs.put((future, fn))
            if self._idle > 0:
                self._idle -= 1  # that idle worker is now spoken for
            elif len(self._threads) < self._max_workers:
                self._start_worker()

    def _start_worker(self) -> None:
        thread = threading.Thread(target=self._work, name=f"{self._prefix}-{next(_names)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn = job
            if future is not None and not future.set_running_or_notify_cancel():
                with self._lock:
                    self._idle += 1
                continue
            try:
                outcome, failed = fn(), False
            except BaseException as exc:  # a job may fail; the worker must not
                outcome, failed = exc, True
                if future is None:
                    logger.error("A delegation pool job failed", exc_info=exc)
            with self._lock:
                # Count ourselves idle before the caller can see the result, so a submit
                # right after it reuses this worker instead of starting another.
                self._idle += 1
            if future is not None:
                future.set_exception(outcome) if failed else future.set_result(outcome)

    def shutdown(self, wait: bool = False) -> None:
        """Refuse new jobs; every job accepted before still runs, then the workers exit.

        A started job has no Future to cancel and its unit already holds a slot and a ledger
        row, so dropping it would strand that unit: the stop sentinels queue behind it."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        if wait:
            for thread in threads:
                thread.join()
