"""The daemon worker pool."""
from __future__ import annotations

import threading

import pytest

from offload.engine.pool import DaemonThreadPool

pytestmark = pytest.mark.timeout(20)


def test_workers_are_named_daemon_threads_and_a_failing_job_does_not_kill_them():
    pool = DaemonThreadPool(1, thread_name_prefix="async-delegate")
    try:
        failed = pool.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failed.result(timeout=5)
        names = pool.submit(lambda: (threading.current_thread().name, threading.current_thread().daemon))
        name, daemon = names.result(timeout=5)
        assert name.startswith("async-delegate-") and daemon
    finally:
        pool.shutdown()


def test_pool_grows_in_place_so_blocked_jobs_do_not_starve_new_ones():
    pool = DaemonThreadPool(1)
    release = threading.Event()
    try:
        pool.submit(lambda: release.wait(10))
        pool.ensure_workers(2)
        assert pool.submit(lambda: "ran").result(timeout=5) == "ran"
        pool.ensure_workers(1)  # never shrinks
        assert pool.max_workers == 2
    finally:
        release.set()
        pool.shutdown()


def test_idle_workers_are_reused_not_multiplied():
    pool = DaemonThreadPool(8)
    try:
        for _ in range(20):
            pool.submit(lambda: None).result(timeout=5)
        assert len(pool._threads) == 1
    finally:
        pool.shutdown(wait=True)


def test_submit_after_shutdown_says_so():
    pool = DaemonThreadPool(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)


def test_max_workers_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        DaemonThreadPool(0)


def test_a_started_job_runs_without_a_future_and_its_failure_is_logged(caplog):
    pool = DaemonThreadPool(1)
    ran = threading.Event()
    try:
        assert pool.start(lambda: 1 / 0) is None
        pool.start(ran.set)  # the same worker survives the failure and runs the next job
        assert ran.wait(5)
        assert len(pool._threads) == 1
    finally:
        pool.shutdown(wait=True)
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)


def test_shutdown_drains_the_jobs_accepted_before_it_then_the_workers_exit():
    pool = DaemonThreadPool(1)
    release, ran = threading.Event(), []
    pool.start(lambda: release.wait(10))
    for n in range(3):  # queued behind the blocked job on the pool's only worker
        pool.start(lambda n=n: ran.append(n))
    submitted = pool.submit(lambda: "ran")
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.start(lambda: None)
    release.set()
    assert submitted.result(timeout=5) == "ran"
    pool._threads[0].join(5)
    assert ran == [0, 1, 2] and not pool._threads[0].is_alive()
