"""``offload worker``: run background units queued in the shared PostgreSQL ledger
(``delegation.run_on: workers``) on this host, until Ctrl-C. On a single-host ledger (SQLite)
it is the per-home background worker instead (``offload.owner.local_worker``).

The loop claims queued units while this process has room (``--concurrency``, default
``delegation.max_concurrent_children``) and the whole fleet is under
``delegation.max_concurrent_children`` (counted in the database across hosts), runs each through
the engine (``offload.subagents.workers.start_claimed``), and wakes on a LISTEN/NOTIFY
notification (a unit queued anywhere) or one of its own units finishing -- with a slow poll as
the fallback for a missed notification. A result settled elsewhere wakes it only while the
fleet is full (its last claim found no slot free on all hosts): only then can it act on one. Every
``recovery_interval_s`` (2 s) it also recovers units of owners whose lease expired (a worker that
died), so their results are reported even when no chat or gateway is running, and their
resumable units continue here within the lease plus 2 s.

Ctrl-C (or SIGTERM) drains: no new claims, the running units finish and are reported, then it
exits 0. A second Ctrl-C exits at once and gives up its lease, so what was running is recovered
by the next recovery pass on any host; a worker that is killed instead is recovered once its
lease (``ledger.lease_seconds``) has expired.
"""
from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from offload.errors import CliError

if TYPE_CHECKING:
    from offload.runtime import Offload

logger = logging.getLogger(__name__)
POLL_S = 5.0  # fallback when a notification was missed
WAKE = {"type": "offload_worker_wake"}


class Worker:
    def __init__(self, off: Offload, concurrency: int | None, say: Callable[[str], None]) -> None:
        from offload.subagents.queue import needs_shared_ledger

        self.runtime, self.cfg, self.say = off, off.config, say
        self.ledger = off.ledger()
        problem = needs_shared_ledger(self.ledger)
        if problem:
            raise CliError(problem.replace("delegation.run_on is `workers`, but", "offload worker needs a shared "
                                           "ledger, but"))
        self.capacity = concurrency or self.cfg.delegation.max_concurrent_children
        self.parent = off.build_agent(f"worker-{self.ledger.host_id}-{os.getpid()}")
        self.bus = off.bus.completion_queue  # nobody else drains it in a worker
        self.running: set[str] = set()
        self.draining = threading.Event()
        self._next_recovery = 0.0
        self._settled: Any = None  # the listener for results settled anywhere, once the fleet was full

    def serve(self) -> int:
        from offload.agent.preload import preload

        preload()
        listener = self.ledger.listen(lambda _ids: self.bus.put(WAKE))
        self.say(f"offload worker on {self.ledger.host_id} (pid {os.getpid()}): up to {self.capacity} unit(s) here, "
                 f"{self.cfg.delegation.max_concurrent_children} across all workers; Ctrl-C drains and exits")
        told_draining = False
        try:
            while not (self.draining.is_set() and not self.running):
                if not self.draining.is_set():
                    self._claim_while_room()
                elif not told_draining:
                    told_draining = True
                    self.say(f"offload worker: draining {len(self.running)} running unit(s); Ctrl-C again to exit now")
                self._recover_when_due()
                self._wait()
        finally:
            listener.stop()
            if self._settled is not None:
                self._settled.stop()
        self.say("offload worker: drained, exiting")
        return 0

    def _claim_while_room(self) -> None:
        from offload.ledger import LedgerError
        from offload.subagents.workers import start_claimed

        while len(self.running) < self.capacity:
            try:
                row = self.ledger.claim_queued_unit(time.time(), self.cfg.delegation.max_concurrent_children)
            except LedgerError as exc:
                if exc.kind == "too_new":  # a newer offload's ledger: nothing here may run, stop with its message
                    raise
                logger.error("offload worker: cannot claim queued units: %s", exc)
                return
            if row is None:
                if getattr(self.ledger, "fleet_full", False) and self._settled is None:
                    self._listen_for_free_slots()
                    continue  # a slot freed before that listener was in place wakes nobody: ask once more
                return
            handle = start_claimed(self.runtime.delegate_tool, row, self.parent, self.cfg.delegation, self.capacity)
            if handle.get("status") == "dispatched":
                self.running.add(row.delegation_id)
                self.say(f"started {row.delegation_id}")
            else:
                logger.error("offload worker: could not start %s: %s", row.delegation_id, handle.get("error"))

    def _listen_for_free_slots(self) -> None:
        """From now on a result settled on any host wakes this worker while the fleet is full."""
        from offload.ledger.postgres.ledger import LISTEN_WAIT_S

        def on_settled(_ids: list[str] | None) -> None:
            if self.ledger.fleet_full:
                self.bus.put(WAKE)
        self._settled = self.ledger.listen(on_settled, settled=True)
        self._settled.listening.wait(timeout=LISTEN_WAIT_S)

    def _recover_when_due(self) -> None:
        """A dead owner's unit is found within ``recovery_interval_s`` of its lease running out;
        one this pass hands back to the queue to be resumed is claimed at once, not at the next wake."""
        if time.monotonic() < self._next_recovery:
            return
        self._next_recovery = time.monotonic() + recovery_interval_s(self.runtime.current_policy(), self.cfg.ledger)
        deliveries = self.runtime.deliveries
        requeued = deliveries.requeued
        try:
            deliveries.recover_abandoned(resuming=True)  # long-lived: it resumes what it can
        except Exception:
            logger.debug("recovery pass failed", exc_info=True)
        if deliveries.requeued != requeued:
            self.bus.put(WAKE)

    def _wait(self) -> None:
        try:
            evt = self.bus.get(timeout=min(POLL_S, max(0.2, self._next_recovery - time.monotonic())))
        except queue.Empty:
            return
        from offload.engine.events import is_interim

        did = evt.get("delegation_id")
        if did in self.running and not is_interim(evt):  # after a notice the unit still runs
            self.running.discard(did)
            self.say(f"finished {did} {evt.get('status')}")


def recovery_interval_s(policy: Any, ledger: Any) -> float:
    """How often a worker looks for units of owners whose lease expired: as often as a consumer
    checks claims (``claim_check_interval_s``, 2 s), so a resume starts within the lease plus
    that (issue 44); at most half the lease, at least a second."""
    return max(1.0, min(policy.claim_check_interval_s, ledger.lease_seconds / 2))


def serve(off: Offload, concurrency: int | None, say: Callable[[str], None], idle_exit_s: float | None = None) -> int:
    """Run a worker on ``off`` until Ctrl-C/SIGTERM drains it; a second one exits at once. On a
    single-host ledger, the per-home worker (``offload.owner.local_worker``)."""
    from offload.subagents.queue import needs_shared_ledger

    if needs_shared_ledger(off.ledger()) is not None:
        return _serve_local(off, concurrency, say, idle_exit_s)
    worker = Worker(off, concurrency, say)

    def on_signal(signum: int, _frame: Any) -> None:
        if worker.draining.is_set():
            raise KeyboardInterrupt
        worker.draining.set()  # the serve loop says so: printing here could land inside one of its prints
        worker.bus.put(WAKE)

    def abandoned() -> None:
        worker.ledger.lease.release()  # fences out our unfinished units: any host recovers them now
        say(f"offload worker: exited with {len(worker.running)} unit(s) unfinished; the next recovery pass on any "
            "host reports them (finished subagents keep their results)")
    return _until_drained(worker.serve, on_signal, abandoned)


def _serve_local(off: Offload, concurrency: int | None, say: Callable[[str], None], idle_exit_s: float | None) -> int:
    from offload.owner.local_worker import LocalWorker, on_signal

    worker = LocalWorker(off, concurrency, say, idle_exit_s)
    return _until_drained(worker.serve, on_signal(worker), lambda: say(
        f"offload worker: exited with {worker.running} unit(s) unfinished; the next long-lived offload process on "
        "this home resumes those that log their steps (delegation.resume: auto)"))


def _until_drained(serve: Callable[[], int], on_signal: Callable[[int, Any], None],
                   abandoned: Callable[[], None]) -> int:
    """``serve()`` with Ctrl-C and SIGTERM asking it to drain; a second one (``on_signal``
    raises KeyboardInterrupt) leaves at once: ``abandoned()``, exit 130."""
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return serve()
    except KeyboardInterrupt:
        abandoned()
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
