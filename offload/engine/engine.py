"""``Delegations``: the owner of background delegation units — records, capacity slots, the
worker pool, dispatch and finalize; the roster, interrupts and the stall loop hang off it.

It is given where to record (``ledger()``, called per use: the home may change), where to
announce a finished unit (``publish(event)``, the completion bus) and its numbers
(``policy()``, read per use). It runs any zero-argument ``runner`` and samples any
``progress_fn``; it knows nothing of models, the CLI or the gateway.

Invariants:
- capacity check and record insert happen under one hold of ``lock``; the units of one call
  share one slot (``slot_key``), and ``finalizing`` holds no slot;
- a unit is finalized exactly once: ``running``/``stalling`` → ``finalizing`` → terminal,
  guarded by the record status, so a late runner return after a forced stall is ignored;
- the event is persisted, then published, then the record turns terminal; a failing durable
  write is logged and never blocks delivery or the slot;
- a batch unit publishes at most one interim failure notice (its first failed child while
  siblings still run); it is never persisted and the unit's final event still follows;
- no lock is held across I/O or a callback: collect under the lock, act outside it.

One module past the ~400-line guideline, on purpose: dispatch, finalize, pruning and the
queries all read and write the one record table under the one ``lock``, and the invariants
above are about their order; split apart, that lock and table would be handed across modules.
What a running unit records before it finalizes (its children's steps, each finished child) is
the mixin ``engine.unit_progress``, which only appends under that lock.
"""
from __future__ import annotations

import contextvars
import os
import random
import threading
import time
from collections import Counter
from typing import Any, Callable

from offload.engine import roster
from offload.engine.events import build_event, crash_result
from offload.engine.handover import HandOver
from offload.engine.health import LedgerHealth
from offload.ledger import DelegationLedger, DispatchRow, LedgerError
from offload.engine.liveness import current_owner
from offload.engine.log import logger
from offload.engine.observers import notify
from offload.engine.policy import DEFAULTS, Policy
from offload.engine.pool import DaemonThreadPool
from offload.engine.loop import Clock, Loop
from offload.engine.stall import StallLoop
from offload.engine.states import ACTIVE_STATES, COMPLETED, ERROR, LIVE_STATES, STOP_USER, result_state
from offload.engine.unit_progress import UnitProgress
from offload.engine.units import UnitSpec, capacity_error, invalid_dispatch, new_record
from offload.origin import IDENTITY_KEYS, Origin

Record = dict[str, Any]
FULL_ACROSS_HOSTS = object()  # _persist_dispatch: a ledger shared by several hosts has no free slot


_ids = random.Random(os.urandom(32))
# A forked child must not repeat its parent's ids: it reseeds from the OS.
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def new_delegation_id() -> str:
    # 48 random bits: with 32 (the reference's 8 hex digits) two of 10,000 delegations share an
    # id about once in a hundred runs, and the ledger row of the older one is replaced. Drawn
    # from this module's own generator, seeded by the OS: os.urandom per dispatch is a syscall
    # that gives up the GIL, a thread switch under load; a uuid4 object costs 5x more again.
    return "deleg_%012x" % _ids.getrandbits(48)


class Delegations(UnitProgress):
    def __init__(self, *, ledger: Callable[[], DelegationLedger], publish: Callable[[dict[str, Any]], None],
                 policy: Callable[[], Policy] = lambda: DEFAULTS, health: LedgerHealth | None = None,
                 records: dict[str, Record] | None = None, lock: threading.Lock | None = None,
                 slots: Counter[str] | None = None, clock: Clock | None = None,
                 on_dispatched: Callable[[], None] | None = None,
                 on_finalized: Callable[[], None] | None = None) -> None:
        """``clock``: what drives the stall loop (default: real time; tests pass a FakeClock);
        ``on_dispatched()``: called after each dispatch (the runtime's owner loop starts on it);
        ``on_finalized()``: called after a unit finalized and freed its slot, outside every lock
        (the runtime's admission queue starts the next queued unit on it)."""
        self.ledger, self.publish, self.policy = ledger, publish, policy
        self.on_dispatched, self.on_finalized = on_dispatched, on_finalized
        self.closed = False
        self.health = health or LedgerHealth()
        self.records: dict[str, Record] = {} if records is None else records
        self.lock = lock or threading.Lock()
        self.slots: Counter[str] = Counter() if slots is None else slots  # slot_key -> running/stalling units
        # Terminal records in the order finalize retired them (oldest first): retention drops
        # from the front, so a finalize prunes without scanning every record.
        self._retired: dict[str, Record] = {}
        self.executor: DaemonThreadPool | None = None
        self._executor_lock = threading.Lock()
        self.stalls = StallLoop(self, clock)
        self.handover = HandOver()  # a leaving process's safe point and its units given away

    # -- hooks a facade may route through patchable names ----------------------------------------
    def new_id(self) -> str:
        return new_delegation_id()

    def pool_for(self, max_workers: int) -> DaemonThreadPool:
        return self.get_executor(max_workers)

    def persist(self, evt: dict[str, Any], result: dict[str, Any], snapshot: Record | None) -> None:
        self.persist_completion(evt, result, snapshot)

    # -- pool ---------------------------------------------------------------------------------------
    def get_executor(self, max_workers: int) -> DaemonThreadPool:
        with self._executor_lock:
            if self.executor is None:
                self.executor = DaemonThreadPool(max(1, max_workers), thread_name_prefix="async-delegate")
            else:
                self.executor.ensure_workers(max_workers)
            return self.executor

    # -- dispatch -----------------------------------------------------------------------------------
    def dispatch(self, spec: UnitSpec, runner: Callable[[], Any], cap: int, *, interrupt_fn=None,
                 progress_fn=None, transcript_fn=None, hold_slot: bool = False) -> dict[str, Any]:
        """Start one unit; ``{"status": "dispatched", "delegation_id"}`` or ``{"status": "rejected", "error"}``.

        ``transcript_fn``: what the children said so far, read by the runtime's journal
        (``offload.owner.journal``) off this path; kept until the unit is finalized.
        ``hold_slot`` keeps the unit's slot taken even if it finishes at once, until
        ``release_slot_hold``: the caller is still dispatching the other units of one call."""
        invalid = invalid_dispatch(runner, cap) or (
            "this offload runtime is closed; open a new one to delegate" if self.closed else None)
        if invalid:
            return {"status": "rejected", "error": invalid}
        record = new_record(spec, spec.delegation_id or self.new_id())
        record["interrupt_fn"], record["progress_fn"], record["transcript_fn"] = interrupt_fn, progress_fn, transcript_fn
        did, slot = record["delegation_id"], record["slot_key"]
        holds = 2 if hold_slot else 1
        with self.lock:
            if did in self.records:
                return {"status": "rejected", "error": f"delegation_id {did!r} is already in use; pass a new id or none"}
            opens_slot = slot not in self.slots
            if opens_slot and len(self.slots) >= cap:
                return {"status": "rejected", "error": capacity_error(record["is_batch"], cap), "at_capacity": True}
            self.records[did] = record
            self.slots[slot] += holds
            # The pool is sized by live units only when they may outnumber the cap; counting
            # them is a scan of every record, so skip it when the records alone cannot.
            live_units = (0 if len(self.records) <= cap
                          else sum(1 for r in self.records.values() if r["status"] in LIVE_STATES))
        notify("dispatching", did, record=record)
        warning = self._persist_dispatch(record, cap if opens_slot else None)
        if warning is FULL_ACROSS_HOSTS:
            self._abandon_unscheduled(record, holds)
            return {"status": "rejected", "at_capacity": True,
                    "error": capacity_error(record["is_batch"], cap, " on all hosts sharing the ledger")}
        if isinstance(warning, LedgerError):  # a newer offload's ledger: refuse, never run unrecorded beside it
            self._abandon_unscheduled(record, holds)
            return {"status": "rejected", "error": str(warning)}
        # The worker runs in the dispatcher's context (session variables, profile). A Context can
        # be entered by one thread at a time, so the monitor's forced finalize uses a copy.
        context = record["_context"] = contextvars.copy_context()
        try:
            pool = self.pool_for(max(cap, live_units))
            # Nobody waits on the unit's future: the daemon pool can skip making one.
            (pool.start if isinstance(pool, DaemonThreadPool) else pool.submit)(
                lambda: context.run(self._work, did, runner))
        except Exception as exc:  # the pool refused (shut down): undo everything
            self._abandon_unscheduled(record, holds)
            kind = " batch" if record["is_batch"] else ""
            return {"status": "rejected", "error": f"Failed to schedule async delegation{kind}: {exc}"}
        if progress_fn is not None:
            self.stalls.ensure_running()
        logger.info("Dispatched async delegation %s (session_key=%s): %s", did, record["session_key"] or "<cli>",
                    str(record["goal"])[:80])
        handle = {"status": "dispatched", "delegation_id": did}
        notify("dispatched", did, record=record)
        if self.on_dispatched is not None:
            self.on_dispatched()
        if warning:
            handle["warning"] = warning
        return handle

    def _persist_dispatch(self, record: Record, cap: int | None = None) -> str | object | LedgerError | None:
        """Write the ``running`` row. On failure the unit still runs, delivered in memory only,
        unless the ledger belongs to a newer offload (``SchemaTooNew``, returned: the unit is refused).
        ``cap``: the unit opens a new slot; a ledger shared by several hosts admits it only if
        a slot is free on all of them (else ``FULL_ACROSS_HOSTS``, nothing written)."""
        ledger = self.ledger()
        pid, started = current_owner()
        task = {k: record[k] for k in ("goal", "context", "toolsets", "role", "model", "is_batch")}
        task.update({k: record[k] for k in ("goals", "task_indexes", "task_transcripts", "group", "trace_context",
                                            "subagent_config", *IDENTITY_KEYS)
                     if record.get(k)})
        if record.get("_durable"):
            task["durable"] = record["_durable"]
        task["owner_cwd"] = os.getcwd()
        if record["slot_key"] != record["delegation_id"]:
            task["slot_key"] = record["slot_key"]  # a shared ledger counts the call's units as one slot
        row = DispatchRow.of(record["delegation_id"], Origin.of_event(record), record["dispatched_at"], task,
                             pid, started)
        record["_ledger"], record["_ledger_row"] = ledger, row
        within = getattr(ledger, "persist_dispatch_within", None) if cap is not None else None
        try:
            if within is None:
                ledger.persist_dispatch(row, time.time())
            elif not within(row, time.time(), cap):
                return FULL_ACROSS_HOSTS
        except Exception as exc:  # any backend failure: the slot is taken, so the unit must run
            if isinstance(exc, LedgerError) and exc.kind == "too_new":
                return exc  # not a passing failure: every later write is refused too
            self.health.report(ledger, "recording a dispatch", exc,
                               "The unit runs and its result is delivered in memory only.")
            return f"not recorded durably ({exc}); a restart before delivery would lose this result"
        self.health.ok(ledger)
        return None

    def _abandon_unscheduled(self, record: Record, holds: int) -> None:
        with self.lock:
            if self.records.pop(record["delegation_id"], None) is not None:
                for _ in range(holds):
                    self._release_slot_locked(record["slot_key"])
        try:
            record["_ledger"].forget(record["delegation_id"])
        except Exception as exc:
            self.health.report(record["_ledger"], "forgetting an unscheduled unit", exc, "")

    def release_slot_hold(self, slot_key: str) -> None:
        """Give back the extra hold a ``hold_slot=True`` dispatch took on ``slot_key``."""
        with self.lock:
            self._release_slot_locked(slot_key)

    def _release_slot_locked(self, slot: str) -> None:
        if slot not in self.slots:
            return
        self.slots[slot] -= 1
        if self.slots[slot] <= 0:
            del self.slots[slot]

    # -- worker and finalize ------------------------------------------------------------------------
    def _work(self, delegation_id: str, runner: Callable[[], Any]) -> None:
        with self.lock:
            record = self.records.get(delegation_id)
            if record is None:
                return
            record["_started"], record["_progress_ts"] = True, time.monotonic()
            is_batch = record["is_batch"]
        notify("started", delegation_id, record=record)
        started = time.monotonic()
        try:
            result = runner() or {}
            if not isinstance(result, dict):
                raise TypeError(f"runner returned {type(result).__name__}, expected a result dict")
            status = result_state(result, is_batch=is_batch)
        except BaseException as exc:  # the worker never dies with its runner
            logger.exception("Async delegation %s runner crashed", delegation_id)
            result, status = crash_result(exc, is_batch=is_batch, elapsed_s=time.monotonic() - started), ERROR
        self.finalize(delegation_id, result, status)

    def finalize(self, delegation_id: str, result, status: str) -> bool:
        """Finalize exactly once. ``result`` is a dict, or a callable of the record snapshot."""
        with self.lock:
            record = self.records.get(delegation_id)
            if record is None or record["status"] not in ACTIVE_STATES:
                return False  # already finalized (e.g. forced stall, then the runner returned)
            record.update(status="finalizing", completed_at=time.time(), interrupt_fn=None, progress_fn=None)
            self._release_slot_locked(record["slot_key"])
            snapshot = dict(record)
        if callable(result):
            result = result(snapshot)
        self._announce(snapshot, result, status)
        notify("finalized", delegation_id, record=snapshot, status=status,
               stop_reason=snapshot.get("_stop_reason") if status != COMPLETED else None)
        with self.lock:
            record.update(status=status, transcript_fn=None)  # read one last time by the finalized observer
            self._retired[delegation_id] = record
            self._prune_retired_locked()
        if snapshot.get("_ledger") is not None:
            self.health.maybe_prune(snapshot["_ledger"], self.policy)
        if self.on_finalized is not None:
            try:
                self.on_finalized()
            except Exception:  # the next unit's start must never fail this one's finalize
                logger.exception("Async delegation %s: the on_finalized callback failed", delegation_id)
        return True

    def _announce(self, snapshot: Record, result: dict[str, Any], status: str) -> None:
        self.handover.forget(snapshot["delegation_id"])
        if self.handover.was_handed(snapshot["delegation_id"]):
            logger.info("Async delegation %s was handed over; the process that took it reports it",
                        snapshot["delegation_id"])
            return
        evt = build_event(snapshot, result, status)
        try:
            self.persist(evt, result, snapshot)
        except Exception:
            logger.exception("Async delegation %s: durable completion write failed; delivering in-memory only "
                             "(a restart may report this unit as unknown)", evt["delegation_id"])
        try:
            self.publish(evt)
        except Exception:
            logger.exception("Async delegation %s: could not queue the completion; result lost", evt["delegation_id"])

    def persist_completion(self, evt: dict[str, Any], result: dict[str, Any], snapshot: Record | None = None) -> None:
        record = snapshot or self.records.get(evt["delegation_id"]) or {}
        ledger, row = record.get("_ledger"), record.get("_ledger_row")
        if ledger is None or row is None:
            return
        try:
            ledger.persist_completion(row, evt, result, time.time())
        except Exception as exc:
            self.health.report(ledger, "recording a completion", exc, "The result is delivered in memory only.")
            return
        self.health.ok(ledger)
        if record.get("_durable"):  # its result is recorded: its children's step log is not needed
            try:
                ledger.drop_steps(evt["delegation_id"])
            except Exception:
                logger.warning("could not drop the step log of %s; prune drops it with the row",
                               evt["delegation_id"], exc_info=True)

    def _prune_retired_locked(self) -> None:
        """Drop the records finalize retired longest ago beyond the retention count.

        O(1) per finalize, where a scan of every record cost ~17 us at 50 retained. Only
        records this engine retired are counted; ``prune_completed_locked`` also sees any
        terminal record put in ``records`` by hand."""
        retained, retired = self.policy().max_retained_completed, self._retired
        while len(retired) > max(0, retained):
            did = next(iter(retired))
            record = retired.pop(did)
            if self.records.get(did) is record:  # not already pruned or replaced
                del self.records[did]

    def prune_completed_locked(self) -> None:
        """Drop the oldest terminal records beyond the retention count; never a live one.

        A full scan: one pass that builds (age, position, id) tuples inline, and a C-level
        ``min`` for the usual single excess record, not a sort with a Python key."""
        retained = self.policy().max_retained_completed
        if len(self.records) <= retained:
            return
        done = [(r.get("completed_at") or r.get("dispatched_at") or 0.0, i, did)
                for i, (did, r) in enumerate(self.records.items()) if r.get("status") not in LIVE_STATES]
        excess = len(done) - retained
        if excess <= 0:
            return
        oldest = [min(done)] if excess == 1 else sorted(done)[:excess]
        for _, _, did in oldest:
            self.records.pop(did, None)
            self._retired.pop(did, None)

    # -- roster and interrupts ------------------------------------------------------------------------
    def has_room(self, cap: int, slot_key: str | None = None) -> bool:
        """Whether a unit would be admitted now: ``slot_key``'s slot is open, or fewer than ``cap`` are."""
        with self.lock:
            return (slot_key is not None and slot_key in self.slots) or len(self.slots) < cap

    def active_count(self) -> int:
        """Units still live (running, stalling or finalizing)."""
        with self.lock:
            return sum(1 for r in self.records.values() if r.get("status") in LIVE_STATES)

    def active_task_count(self) -> int:
        """Child subagents in running or finalizing units."""
        with self.lock:
            return roster.task_count(self.records.values())

    def has_live_for_session(self, session_key: str = "", origin_ui_session_id: str = "",
                             parent_session_id: str = "") -> bool:
        with self.lock:
            return any(r.get("status") in LIVE_STATES
                       and roster.session_selected(r, session_key, origin_ui_session_id, parent_session_id)
                       for r in self.records.values())

    def list(self) -> list[dict[str, Any]]:
        """Snapshot of every record for /agents UIs: no callables, no private keys."""
        with self.lock:
            listing = roster.snapshot(self.records.values(), time.monotonic())
        return listing.finish()

    def interrupt(self, selected: Callable[[Record], bool], reason: str) -> int:
        """Ask each selected running/stalling unit to stop; each still reports through finalize."""
        with self.lock:
            chosen = [r for r in self.records.values() if r.get("status") in ACTIVE_STATES and selected(r)]
            for record in chosen:
                record.setdefault("_stop_reason", STOP_USER)  # a stall that came first stays the reason
            targets = [(r["delegation_id"], r.get("interrupt_fn")) for r in chosen]
        signalled = sum(roster.call_interrupt(did, fn, reason) for did, fn in targets)
        if targets:
            logger.info("Interrupted %d of %d background delegation(s): %s", signalled, len(targets), reason)
        return signalled

    def loops(self) -> list[Loop]:
        """The engine's background loops (the stall loop), for a runtime that stops them together."""
        return [self.stalls.loop]

    def interrupt_one(self, delegation_id: str, reason: str = "user") -> int:
        """Ask one running/stalling unit to stop; 1 if signalled, else 0."""
        return self.interrupt(lambda r: r.get("delegation_id") == delegation_id, reason)

    def interrupt_session(self, session_key: str = "", origin_ui_session_id: str = "", parent_session_id: str = "",
                          reason: str = "session_end") -> int:
        """Ask every running/stalling unit of one session (``roster.session_selected``) to stop."""
        return self.interrupt(lambda r: roster.session_selected(r, session_key, origin_ui_session_id,
                                                                parent_session_id), reason)

    def close(self) -> None:
        """Refuse new units and stop the stall loop and the pool. Units already running keep
        their daemon threads and still finalize (persist, publish); nothing waits for them."""
        self.closed = True
        self.stalls.stop()
        with self._executor_lock:
            if self.executor is not None:
                self.executor.shutdown(wait=False)
            self.executor = None

    def reset(self) -> None:
        """Forget every unit and stop the pool and the stall loop (tests and embedding apps)."""
        with self._executor_lock:
            if self.executor is not None:
                self.executor.shutdown(wait=False)
            self.executor = None
        self.stalls.stop()
        with self.lock:
            self.records.clear()
            self.slots.clear()
            self._retired.clear()
        self.health.reset()
