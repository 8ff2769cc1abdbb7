"""The admission queue of ``delegation.at_capacity: queue``: a background call that finds every
slot taken waits its turn as ``queued`` rows in the ledger, and is started in order when a slot
frees -- by the process that queued it, or, once that process died, by any live owner of the
ledger (and by ``offload worker``, whose claim takes such rows too).

It sits above the engine: the engine still refuses a unit at capacity (the hermes suite pins
that), and this module decides what a refused call does. The rows are the ones
``delegation.run_on: workers`` queues (``offload.subagents.queue``: the same spec, the same
ledger operations), written *held* by this process (its pid, start time and, on PostgreSQL,
its lease), so nobody else starts them while it lives.

Invariants:
- a queued unit is a ledger row before the call returns, so it survives a crash or restart;
  it holds no slot and is never judged stalled (the engine sees it only once started);
- units start first queued first: a pump takes the oldest row it may start while a slot is
  free, and a new call queues behind rows this process already holds instead of jumping them;
- a row is taken by one conditional ledger write (``claim_queued``), so of two racing owners
  one starts it; a taken row the engine then refuses goes back in its place (``requeue_unit``);
- a unit this process queued starts with the very ``Batch`` of its call (its parent agent and
  credentials); one queued by a process that died is rebuilt from its row, as a worker does;
- the bounds ``delegation.max_queued`` (the ledger) and ``max_queued_per_session`` refuse a
  call past them with an error naming the key; the pump never raises;
- a dead owner's units never make a living one queue or refuse: before a call is queued at
  capacity, the running rows of owners that died are recovered and their queued rows adopted
  (``reclaim_dead``), and the call is tried again.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from offload.engine.delivery import is_this_process
from offload.engine.liveness import current_owner
from offload.engine.states import QUEUED
from offload.ledger import DelegationLedger, DispatchRow, LedgerError, LedgerRow
from offload.subagents import resume
from offload.subagents.child import Batch
from offload.subagents.config import DelegationConfig
from offload.origin import Origin
from offload.subagents.queue import queued_origin, unit_spec

if TYPE_CHECKING:
    from offload.subagents.tool import DelegateTool

logger = logging.getLogger(__name__)
FOREIGN_CHECK_S = 2.0  # how often a consumer looks for queued rows of owners that died
_NEVER_FULL = 1 << 30  # the capacity passed where a unit must never be refused for it

SYNC_OPTION = ", or delegate with background=false"  # a surface without background=false drops it (MCP)
_NOTE = ("All {cap} background slots are busy (delegation.max_concurrent_children), so this is QUEUED: it starts by "
         "itself when a slot frees, and each result arrives as a new message after you END YOUR TURN; do not poll "
         "or wait for it. Tell the user it is queued and carry on.")


@dataclass
class Held:
    """A unit this process queued, as its call built it."""

    unit: Batch
    origin: Origin
    slot_key: str | None
    row: DispatchRow
    written_at: float | None = None  # monotonic, once its row is in the ledger


class Admission:
    def __init__(self, *, tool: DelegateTool, ledger: Callable[[], DelegationLedger],
                 config: Callable[[], DelegationConfig], parent: Callable[[], Any],
                 owner_alive: Callable[[int | None, int | None], bool],
                 recover: Callable[[], int] = lambda: 0) -> None:
        """``parent()``: an agent whose credentials rebuild a unit queued by a process that died
        (asked only then); ``owner_alive``: the liveness check that judges that process;
        ``recover()``: settle the running rows of owners that died, returning how many."""
        self.tool, self.ledger, self.config, self.parent, self.owner_alive = tool, ledger, config, parent, owner_alive
        self.recover = recover
        self._held: dict[str, Held] = {}
        self._starting: dict[str, LedgerRow] = {}  # taken from the ledger, not yet on the engine's roster
        self._adopted: set[str] = set()  # rows of a dead owner this process took and had to put back
        self._refused: dict[str, str] = {}  # of those, why this process could not start them (e.g. no credentials)
        self._lock = threading.Lock()  # guards the dicts and the set
        self._pumping = threading.Lock()  # one pump at a time: rows are taken in order
        self._admitting = threading.Lock()  # one bound check and its writes at a time: the queue holds its limit
        self._next_foreign_check = 0.0
        # Which rows of owners that died this process starts: all by default; a one-request
        # process (offload run) only its own session's, since it exits once those are in.
        self.adopts: Callable[[LedgerRow], bool] = lambda row: True
        # The agent a row queued by another process is rebuilt under (``offload worker``: one
        # in the workspace a handed-over unit ran in); by default ``parent()``.
        self.parent_for: Callable[[LedgerRow], Any] = lambda row: self.parent()
        self.any_workspace = False  # an ``offload worker`` takes handed-over units of any folder

    # -- queueing ---------------------------------------------------------------------------------
    def waiting_here(self) -> bool:
        """Whether units this process queued still wait (a new call queues behind them)."""
        with self._lock:
            return bool(self._held)

    def queue_call(self, call_id: str, units: list[Batch], origin: Origin) -> dict[str, Any]:
        """Queue the completion ``units`` of one call under ``call_id``; the handle the agent gets."""
        cfg = units[0].cfg
        ledger = self.ledger()
        with self._admitting:  # the bound's count and the rows written are one step in this process
            refusal = self._over_bound(ledger, cfg, origin, len(units))
            if refusal:
                return {"status": "error", "error": refusal}
            handles = self._enqueue(call_id, units, origin, ledger)
        if isinstance(handles, str):
            return {"status": "error", "error": handles}
        handle: dict[str, Any] = {
            "status": "dispatched", "mode": "background", "state": QUEUED, "count": len(units[0].tasks),
            "delegation_id": handles[0]["delegation_id"], "goals": units[0].goals,
            "note": _NOTE.format(cap=cfg.max_concurrent_children)}
        if len(units) > 1:
            handle["units"] = handles
        self.pump()  # a slot may have freed meanwhile
        return handle

    def _enqueue(self, call_id: str, units: list[Batch], origin: Origin, ledger: DelegationLedger
                 ) -> list[dict[str, Any]] | str:
        """Write the units' queued rows; their handles, or why the ledger refused."""
        slot_key = call_id if len(units) > 1 else None  # the units of one call share one slot
        pid, started = current_owner()
        handles = []
        for k, unit in enumerate(units):
            unit_id = call_id if len(units) == 1 else f"{call_id}-{k + 1}"
            now = time.time()
            spec = {**unit_spec(unit, origin), "run_on": "local", **({"slot_key": slot_key} if slot_key else {})}
            row = DispatchRow.of(unit_id, origin, now, spec, pid, started)
            held = Held(unit, origin, slot_key, row)
            with self._lock:  # held before it is written: a pump that sees the row knows it as ours
                self._held[unit_id] = held
            try:
                ledger.enqueue_unit(row, now, held=True)
                held.written_at = time.monotonic()
            except LedgerError as exc:
                with self._lock:
                    self._held.pop(unit_id, None)
                done = f" ({len(handles)} unit(s) before it were queued and will run)" if handles else ""
                return f"all background slots are busy and the call could not be queued in the ledger: {exc}{done}"
            handles.append({"delegation_id": unit_id, "group": unit.group, "task_indexes": unit.indexes})
        return handles

    @staticmethod
    def _over_bound(ledger: DelegationLedger, cfg: DelegationConfig, origin: Origin, adding: int) -> str | None:
        queued = ledger.queued_rows()
        session = origin.session_key
        mine = sum(1 for row in queued if session and session in (row.origin_session, row.parent_session_id))
        for count, limit, key, whose in ((len(queued), cfg.max_queued, "max_queued", "in the queue"),
                                         (mine, cfg.max_queued_per_session, "max_queued_per_session",
                                          "of this session in the queue")):
            if count + adding > limit:
                return (f"not started: all {cfg.max_concurrent_children} background slots are busy and {count} "
                        f"unit(s) {whose} already wait (delegation.{key}={limit}). Wait for results to arrive, "
                        f"do this yourself{SYNC_OPTION}; the operator can raise it: "
                        f"offload config set delegation.{key} {max(limit * 2, limit + adding)}")
        return None

    def reclaim_dead(self) -> bool:
        """Before a call is queued or refused at capacity: recover the running rows of owners
        that died (on a shared ledger they hold slots until then) and start, first queued first,
        the queued rows such owners left. True if a running row was recovered, so a slot may be
        free now. Never raises."""
        try:
            recovered = self.recover()
        except Exception:
            logger.warning("recovering the units of processes that died failed", exc_info=True)
            return False
        if recovered:
            self.pump(foreign=True)
        return recovered > 0

    # -- starting ---------------------------------------------------------------------------------
    def pump(self, *, foreign: bool = False) -> int:
        """Start queued units while slots are free, first queued first; how many started.
        ``foreign``: also look for rows of owners that died (else only when this process holds
        queued units). Never raises."""
        with self._lock:
            if not self._held and not foreign:
                return 0  # nothing of ours waits: no ledger read on the finalize path
        with self._pumping:
            try:
                return self._pump()
            except Exception:
                logger.warning("starting queued background units failed; they stay queued", exc_info=True)
                return 0

    def maybe_pump_foreign(self, now: float | None = None) -> int:
        """A consumer's periodic look (at most every ``FOREIGN_CHECK_S``) for queued rows this
        process may start: its own, and those of owners that died (a restart finds them here)."""
        now = time.monotonic() if now is None else now
        if now < self._next_foreign_check:
            return 0
        self._next_foreign_check = now + FOREIGN_CHECK_S
        return self.pump(foreign=True)

    def _pump(self) -> int:
        cfg = DelegationConfig.model_validate(self.config())
        cap, engine, ledger = cfg.max_concurrent_children, self.tool.engine, self.ledger()
        if not ledger.exists():
            return 0
        read_at = time.monotonic()
        queued = ledger.queued_rows()
        self._forget_taken({row.delegation_id for row in queued}, read_at)
        if not engine.has_room(cap):
            return 0
        started = 0
        for row in queued:
            if not self._may_start(ledger, row):
                continue
            slot_key = (row.task or {}).get("slot_key")
            if not engine.has_room(cap, slot_key):
                break  # first queued, first started: nothing overtakes the head of the queue
            taken = self._claim(ledger, row, cap)
            if taken is None:
                continue  # another owner took it
            if not self._start(ledger, taken, cfg, cap):
                break
            started += 1
        return started

    def _claim(self, ledger: DelegationLedger, row: LedgerRow, cap: int) -> LedgerRow | None:
        """``ledger.claim_queued`` with the row listed as starting first (``items``): a reader of
        the ledger's queue, then ``items``, then the engine's roster never misses it."""
        with self._lock:
            self._starting[row.delegation_id] = row
        taken = None
        try:
            taken = ledger.claim_queued(row.delegation_id, time.time(), current_owner(), cap)
            return taken
        finally:
            if taken is None:
                with self._lock:
                    self._starting.pop(row.delegation_id, None)

    def _forget_taken(self, queued_ids: set[str], read_at: float) -> None:
        """Drop held units whose row left the queue without this process (stopped by ``offload
        stop``, or taken by another owner): it will never start them, so nobody waits on them."""
        with self._lock:
            for unit_id, held in list(self._held.items()):
                if (unit_id not in queued_ids and unit_id not in self._starting
                        and held.written_at is not None and held.written_at < read_at):
                    del self._held[unit_id]

    def may_start(self, ledger: DelegationLedger, row: LedgerRow) -> bool:
        """Whether this process may start a queued ``row`` (its capacity aside)."""
        return self._may_start(ledger, row)

    def _may_start(self, ledger: DelegationLedger, row: LedgerRow) -> bool:
        if row.owner_pid is None:  # handed over by a live owner (any process takes it), or for `offload worker`
            return resume.handed_over(row) and self.adopts(row) and self._works_where(row)
        with self._lock:
            if row.delegation_id in self._held or row.delegation_id in self._adopted:
                return True
        # Not ours while we hold it (by pid, and by a live lease where the ledger has leases): a
        # sibling ``Offload`` of this process that closed gave its lease up, so its rows are taken.
        return (not ledger.owned_here(row, is_this_process) and ledger.is_abandoned(row, self.owner_alive)
                and self.adopts(row))

    def _works_where(self, row: LedgerRow) -> bool:
        """Whether this process can run a handed-over row's children where they worked (an
        ``offload worker`` rebuilds them there; another process only in its own workspace, so
        it never takes a unit it would have to fail)."""
        if self.any_workspace:
            return True
        folder = resume.workspace_of(row)
        try:
            return folder is None or str(getattr(self.parent(), "workspace", "")) == folder
        except Exception:  # no credentials here to build the agent: not for us
            return False

    def _start(self, ledger: DelegationLedger, row: LedgerRow, cfg: DelegationConfig, cap: int) -> bool:
        """Dispatch a taken row on the engine; False (the row back in the queue) if refused."""
        from offload.subagents.dispatch import dispatch_unit
        from offload.subagents.workers import start_claimed

        with self._lock:
            held = self._held.get(row.delegation_id)
            self._starting[row.delegation_id] = row
        try:
            try:
                if held is not None:
                    res = dispatch_unit(self.tool.engine, held.unit, row.delegation_id, held.origin, cap,
                                        held.slot_key, False)
                else:  # queued by a process that died: rebuilt from its row with this process's credentials
                    res = start_claimed(self.tool, row, self.parent_for(row), cfg, cap)
            except Exception as exc:  # e.g. no credentials here to rebuild it: it waits for an owner that has
                res = {"status": "rejected", "error": f"{type(exc).__name__}: {exc}"}
            if res.get("status") == "dispatched":
                with self._lock:
                    self._held.pop(row.delegation_id, None)
                    self._adopted.discard(row.delegation_id)
                    self._refused.pop(row.delegation_id, None)
                logger.info("Started queued delegation %s", row.delegation_id)
                return True
            logger.info("Queued delegation %s could not start yet (%s); it stays queued", row.delegation_id,
                        res.get("error"))
            if held is None:
                with self._lock:
                    self._adopted.add(row.delegation_id)  # now under this owner: start it later
                    self._refused[row.delegation_id] = str(res.get("error"))
            ledger.requeue_unit(held.row if held is not None else _as_dispatch(row), time.time())
            return False
        finally:
            with self._lock:
                self._starting.pop(row.delegation_id, None)

    # -- stopping ---------------------------------------------------------------------------------
    def cancel(self, selected: Callable[[LedgerRow], bool], reason: str) -> int:
        """Stop the queued units ``selected`` picks, whoever queued them: each is taken from the
        queue (one owner wins it) and reported at once, its children ``interrupted`` without
        having run, as a result of its own session. How many were stopped; never raises."""
        try:
            ledger = self.ledger()
            rows = [row for row in ledger.queued_rows() if selected(row)] if ledger.exists() else []
        except LedgerError:
            logger.warning("cannot read the queued units to stop them", exc_info=True)
            return 0
        stopped = 0
        for row in rows:
            try:
                taken = ledger.claim_queued(row.delegation_id, time.time(), current_owner(), _NEVER_FULL)
                if taken is None:
                    continue  # started or stopped meanwhile
                with self._lock:
                    self._held.pop(row.delegation_id, None)
                    self._adopted.discard(row.delegation_id)
                stopped += self._report_stopped(taken, reason)
            except Exception:
                logger.warning("stopping queued unit %s failed", row.delegation_id, exc_info=True)
        return stopped

    def _report_stopped(self, row: LedgerRow, reason: str) -> int:
        from offload.engine.units import batch_spec

        spec = row.task or {}
        goals = [str(g) for g in spec.get("goals") or []] or [str(spec.get("goal") or "")]
        indexes = [int(i) for i in spec.get("task_indexes") or range(len(goals))]
        error = f"stopped before it started ({reason}); it never ran"
        entries = [{"task_index": i, "status": "interrupted", "summary": None, "error": error} for i in indexes]
        unit = batch_spec(goals, indexes, role=spec.get("role") or "leaf", model=spec.get("model"),
                          delegation_id=row.delegation_id, subagent_config=spec.get("subagent_config"),
                          origin=queued_origin(row))
        # It never runs: the engine only records and reports it, so it may take one slot past the cap.
        cap = DelegationConfig.model_validate(self.config()).max_concurrent_children + 1
        res = self.tool.engine.dispatch(unit, lambda: {"results": entries, "total_duration_seconds": 0}, cap)
        if res.get("status") == "dispatched":
            return 1
        with self._lock:
            self._adopted.add(row.delegation_id)  # taken by this owner: it starts it later
        self.ledger().requeue_unit(_as_dispatch(row), time.time())
        return 0

    # -- views ------------------------------------------------------------------------------------
    def items(self) -> list[dict[str, Any]]:
        """Units this process queued, or took from the ledger's queue, that have not reached the
        engine's roster, in the shape of the engine's ``list()`` items (``status`` ``queued``)
        -- so a driver that reads this before the engine's roster never misses a unit between
        the two."""
        with self._lock:
            held = list(self._held.values())
            starting = [row for unit_id, row in self._starting.items() if unit_id not in self._held]
        return [*({"delegation_id": h.row.delegation_id, "status": QUEUED, "goal": h.unit.goals[0] if h.unit.goals
                 else "", "goals": h.unit.goals, "group": h.unit.group, "task_indexes": h.unit.indexes,
                 "dispatched_at": h.row.dispatched_at, **h.origin.flat(), "origin": h.origin.to_json(),
                 "where": "queued: starts when a background slot frees"} for h in held),
                *(_starting_item(row) for row in starting)]

    def reset(self) -> None:
        """Forget the units held here (tests and embedding apps; their rows stay queued)."""
        with self._lock:
            self._held.clear()
            self._adopted.clear()
            self._refused.clear()

    def refused(self) -> dict[str, str]:
        """The rows this process took from the queue and could not start, with why (for a
        worker: no credentials for them here); each is tried again at every pump."""
        with self._lock:
            return dict(self._refused)


def _starting_item(row: LedgerRow) -> dict[str, Any]:
    """A row taken from the ledger's queue (a dead owner's, or one handed over) on its way to
    the engine's roster, in the shape of ``items``."""
    task, origin = row.task or {}, Origin.of_row(row)
    goals = task.get("goals") or [task.get("goal") or ""]
    return {"delegation_id": row.delegation_id, "status": QUEUED, "goal": goals[0] if goals else "", "goals": goals,
            "group": task.get("group"), "task_indexes": task.get("task_indexes"),
            "dispatched_at": row.dispatched_at, **origin.flat(), "origin": origin.to_json(), "where": "starting"}


def _as_dispatch(row: LedgerRow) -> DispatchRow:
    return DispatchRow(row.delegation_id, row.origin_session, row.dispatched_at, row.task or {},
                       row.origin_ui_session_id, row.origin_session_id, row.parent_session_id, row.owner_pid,
                       row.owner_started_at)
