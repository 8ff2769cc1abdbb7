"""``offload worker`` on a single-host ledger (SQLite): the per-home background worker.

It runs what the processes of this home left to run: units handed over by a client that
closed (``offload.owner.handover``: queued, owner cleared) and the units of owners that died (their
resumable units are put back in the queue by its recovery pass; the queued units they held
are adopted). It is the admission queue's machinery (``offload.subagents.admission``), not a
shortcut: each row is taken by one conditional ledger write that bumps its owner epoch
(``claim_queued``), within this process's capacity (``--concurrency``, default
``delegation.max_concurrent_children``: the engine's slots), first queued first, and started
through ``workers.start_claimed`` with this worker's credentials. A handed-over unit's children
are rebuilt in the folder they worked in (the process that handed them over ran there); a dead
owner's unit only in this worker's own workspace, as any resuming process.

One per home (``offload.owner.home_worker``'s lock): a second one exits at once, 0. It wakes when one
of its units finishes and polls the ledger every ``POLL_S``. With ``--idle-exit-s`` it exits
after that long with nothing running and nothing it may start (it then looks once more after
giving up the lock, so a unit handed over at that moment starts a new worker). Ctrl-C or
SIGTERM drains: nothing new starts, the running units finish and are reported, then it exits 0;
a second one exits at once, and the units it ran are resumed by the next long-lived process.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from offload.runtime import Offload

logger = logging.getLogger(__name__)
POLL_S = 1.0


class LocalWorker:
    def __init__(self, off: Offload, concurrency: int | None, say: Callable[[str], None],
                 idle_exit_s: float | None = None) -> None:
        self.runtime, self.say, self.idle_exit_s = off, say, idle_exit_s
        self.capacity = concurrency or off.config.delegation.max_concurrent_children
        self.bus = off.bus.completion_queue  # nobody else drains it in a worker
        self.draining = threading.Event()
        self._parents: dict[str | None, Any] = {}
        self._told_refused: set[str] = set()  # units it could not start, said once each
        off.admission.parent_for, off.admission.any_workspace = self._parent_for, True
        off.admission.config = self._config

    def _config(self) -> Any:
        """The delegation settings the queue is pumped with: this worker's capacity."""
        base = self.runtime.delegate_tool.delegation_config()
        return base.model_copy(update={"max_concurrent_children": self.capacity})

    @property
    def running(self) -> int:
        return self.runtime.engine.active_count()

    def serve(self) -> int:
        from offload.owner import home_worker

        lock = home_worker.hold(self.runtime.home)
        if lock is None:
            self.say(f"offload worker: another worker (pid {home_worker.holder(self.runtime.home)}) serves "
                     f"{self.runtime.home}; exiting")
            return 0
        from offload.agent.preload import preload

        preload()
        self.say(f"offload worker on {self.runtime.home} (pid {os.getpid()}): up to {self.capacity} unit(s); "
                 "Ctrl-C drains and exits")
        try:
            self._loop()
        finally:
            lock.close()
        if self._startable():  # handed over while we were leaving: someone must run it
            home_worker.ensure(self.runtime.home, self.idle_exit_s or home_worker.IDLE_EXIT_S)
        self.say("offload worker: drained, exiting" if self.draining.is_set() else "offload worker: idle, exiting")
        return 0

    def _loop(self) -> None:
        idle_since = time.monotonic()
        told_draining = False
        while not (self.draining.is_set() and self.running == 0):
            if not self.draining.is_set():
                self._take()
            elif not told_draining:
                told_draining = True
                self.say(f"offload worker: draining {self.running} running unit(s); Ctrl-C again to exit now")
            if self.running or self._startable():
                idle_since = time.monotonic()
            elif self.idle_exit_s is not None and time.monotonic() - idle_since >= self.idle_exit_s:
                return
            self._wait()

    def _take(self) -> None:
        off = self.runtime
        try:
            off.deliveries.recover_abandoned(resuming=True)  # dead owners' resumable units back to the queue
        except Exception:
            logger.debug("recovery pass failed", exc_info=True)
        if off.admission.pump(foreign=True):
            self.say(f"running {self.running} unit(s)")
        for unit_id, why in off.admission.refused().items():
            if unit_id not in self._told_refused:
                self._told_refused.add(unit_id)
                self.say(f"offload worker: cannot start {unit_id} ({why}); it stays queued for the next offload "
                         "process on this home that can run it")

    def _startable(self) -> bool:
        """Whether a queued row waits that this worker may start (its capacity aside) and has not
        failed to start here: one it cannot run (no credentials for it) must not keep it alive."""
        ledger = self.runtime.ledger()
        try:
            rows = ledger.queued_rows() if ledger.exists() else []
            refused = self.runtime.admission.refused()
            return any(row.delegation_id not in refused and self.runtime.admission.may_start(ledger, row)
                       for row in rows)
        except Exception:
            logger.debug("reading the queue failed", exc_info=True)
            return False

    def _wait(self) -> None:
        try:
            evt = self.bus.get(timeout=POLL_S)
        except queue.Empty:
            return
        from offload.engine.events import is_interim

        if evt.get("delegation_id") and not is_interim(evt):
            self.say(f"finished {evt['delegation_id']} {evt.get('status')}")

    def _parent_for(self, row: Any) -> Any:
        """The agent a row is rebuilt under: a handed-over unit's in the folder it worked in."""
        from offload.subagents.resume import handed_over, workspace_of

        folder = workspace_of(row) if handed_over(row) else None
        if folder not in self._parents:
            cfg = self.runtime.config
            config = cfg.model_copy(update={"workspace": folder}) if folder else None
            self._parents[folder] = self.runtime.build_agent(f"worker-{os.getpid()}", config=config)
        return self._parents[folder]


def on_signal(worker: LocalWorker) -> Callable[[int, Any], None]:
    def handler(_signum: int, _frame: Any) -> None:
        if worker.draining.is_set():
            raise KeyboardInterrupt
        worker.draining.set()  # the loop says so: printing here could land inside one of its prints
    return handler

