"""An in-process ledger: the same contract as SQLite, kept in a dict under one lock.

For tests and for embedding the engine where durability is not wanted (results survive only
as long as the process). It is the second row of the contract suite, which keeps the
interface honest: nothing the engine relies on may be a SQLite accident.

Instances opened on one ``MemoryStore`` see each other's writes (as two connections to one
file do); ``open_ledger("memory://NAME")`` shares a store per name while any instance on it
is alive. Stored JSON columns go through the same codec as every backend, so a row reads back
exactly as it would from disk.
"""
from __future__ import annotations

import threading
import weakref
from collections import Counter
from dataclasses import replace
from typing import Any, Callable

from offload.ledger.codec import decode_row, dumps, loads
from offload.ledger.memory_side import MemorySideTables, stop_reason_of
from offload.ledger.tally import tallied_state
from offload.ledger.approval_table import MemoryApprovals
from offload.ledger.spend_table import MemorySpend
from offload.ledger.step_table import MemorySteps
from offload.ledger import browse as browse_sql
from offload.ledger.browse import Browse
from offload.ledger.owner_epoch import MemoryEpochs
from offload.ledger.protocol import DispatchRow, LedgerError, LedgerRow, SingleHostOwners

Row = dict[str, Any]  # column name -> stored value, as in the SQLite table
_SETTLED = ("delivered", "dropped")


class MemoryStore:
    """The rows of one in-memory ledger and the lock every instance on it takes."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.lock = threading.Lock()
        self.rows: dict[str, Row] = {}
        self.created = False
        self.controls: dict[str, tuple[str, float]] = {}  # id -> (action, expires_at); see memory_side
        self.activity: dict[str, tuple[float, dict[str, Any]]] = {}  # id -> (written_at, snapshot)
        self.pruned: Counter[tuple[str, str]] = Counter()  # (state, delivery_state) -> units pruned
        self.journal: list[Any] = []  # JournalEntry, in append order; see memory_side
        self.approvals: dict[str, dict[str, Any]] = {}  # request id -> request; see approval_table
        self.spend: dict[tuple[str, str, str], tuple[int, float, int]] = {}  # (day, session, call) -> spent
        self.steps: dict[tuple[str, int, int], Any] = {}  # (id, task index, seq) -> step_table.Step


_named: weakref.WeakValueDictionary[str, MemoryStore] = weakref.WeakValueDictionary()
_named_lock = threading.Lock()


def named_store(name: str) -> MemoryStore:
    """The process-wide store called ``name`` (a fresh private store when ``name`` is empty)."""
    if not name:
        return MemoryStore()
    with _named_lock:
        store = _named.get(name)
        if store is None:
            store = _named[name] = MemoryStore(name)
        return store


def _new_row(row: DispatchRow, state: str, completed_at: float | None, now: float,
             event_json: str | None, result_json: str | None, epoch: int = 0) -> Row:
    return {"delegation_id": row.delegation_id, "origin_session": row.origin_session,
            "origin_ui_session_id": row.origin_ui_session_id, "origin_session_id": row.origin_session_id,
            "parent_session_id": row.parent_session_id, "state": state, "dispatched_at": row.dispatched_at,
            "completed_at": completed_at, "updated_at": now, "task_json": dumps(row.task),
            "event_json": event_json, "result_json": result_json, "delivery_state": "pending",
            "delivery_attempts": 0, "delivered_at": None, "delivery_claim": None, "delivery_claimed_at": None,
            "owner_pid": row.owner_pid, "owner_started_at": row.owner_started_at,
            "delivery_claim_pid": None, "delivery_claim_started_at": None, "delivery_progress": 0, "drop_reason": None,
            "owner_epoch": epoch}


class MemoryLedger(MemorySideTables, MemoryApprovals, MemorySpend, MemorySteps, MemoryEpochs, SingleHostOwners):
    """The ledger in a ``MemoryStore``. Thread-safe."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store if store is not None else MemoryStore()
        self.location = f"memory://{self.store.name}"

    def exists(self) -> bool:
        return self.store.created

    def close(self) -> None:
        pass  # nothing is held open; the store lives while any instance refers to it

    # -- writes of the running engine ------------------------------------------------------
    def persist_dispatch(self, row: DispatchRow, now: float) -> None:
        stored = _new_row(row, "running", None, now, None, None, self.epoch_of(row.delegation_id))
        with self.store.lock:
            self.store.rows[row.delegation_id] = stored
            self.store.created = True

    def forget(self, delegation_id: str) -> None:
        with self.store.lock:
            self.store.rows.pop(delegation_id, None)

    def record_unit_child(self, delegation_id: str, entry: dict[str, Any], now: float) -> bool:
        def add(row: Row) -> None:
            results = [r for r in ((loads(row["result_json"]) or {}).get("results") or [])
                       if r.get("task_index") != entry.get("task_index")]
            row.update(result_json=dumps({"results": [*results, entry], "partial": True}), updated_at=now)
        return self._change(delegation_id, lambda r: r["state"] == "running" and self.fenced(r), add)

    def persist_completion(self, row: DispatchRow, event: dict[str, Any], result: dict[str, Any], now: float) -> None:
        state, completed_at = event.get("status") or "unknown", event.get("completed_at") or now
        event_json, result_json = dumps(event), dumps(result)
        with self.store.lock:
            stored = self.store.rows.get(row.delegation_id)
            if stored is None:  # the row vanished: write it whole again
                self.store.rows[row.delegation_id] = _new_row(row, state, completed_at, now, event_json, result_json)
                self.store.created = True
                return
            if not self.fenced(stored):
                raise LedgerError(f"delegation {row.delegation_id} was handed over to or taken over by another "
                                  "process, so this process does not record its result", kind="fenced")
            stored.update(state=state, completed_at=completed_at, updated_at=now, event_json=event_json,
                          result_json=result_json, delivery_state="pending", delivery_claim=None,
                          delivery_claimed_at=None, delivery_progress=0)

    # -- the admission queue -----------------------------------------------------------------------
    def enqueue_unit(self, row: DispatchRow, now: float, held: bool = False) -> bool:
        row = row if held else replace(row, owner_pid=None, owner_started_at=None)
        with self.store.lock:
            self.store.created = True
            if row.delegation_id in self.store.rows:
                return False
            self.store.rows[row.delegation_id] = _new_row(row, "queued", None, now, None, None)
            return True

    def queued_rows(self) -> list[LedgerRow]:
        return self._select(lambda r: r["state"] == "queued", key=lambda r: (r["dispatched_at"], r["delegation_id"]))

    def claim_queued(self, delegation_id: str, now: float, owner: tuple[int, int | None],
                     max_running: int) -> LedgerRow | None:
        taken = self._change(delegation_id, lambda r: r["state"] == "queued", lambda r: r.update(
            state="running", owner_pid=owner[0], owner_started_at=owner[1], updated_at=now,
            owner_epoch=int(r.get("owner_epoch") or 0) + 1))
        if not taken:
            return None
        row = self.get(delegation_id)
        if row is not None:
            self.took(delegation_id, int(row.extra.get("owner_epoch") or 0))
        return row

    def requeue_unit(self, row: DispatchRow, now: float) -> None:
        with self.store.lock:
            stored = self.store.rows.get(row.delegation_id)
            if stored is None:
                self.store.rows[row.delegation_id] = _new_row(row, "queued", None, now, None, None)
            elif stored["state"] == "running" and stored["event_json"] is None:
                stored.update(state="queued", updated_at=now)

    # -- recovery and replay -------------------------------------------------------------------
    def running_rows(self) -> list[LedgerRow]:
        return self._select(lambda r: r["state"] == "running", key=lambda r: (r["dispatched_at"], r["delegation_id"]))

    def settle_abandoned(self, delegation_id: str, event: dict[str, Any], result: dict[str, Any], now: float) -> bool:
        event_json, result_json = dumps(event), dumps(result)
        return self._change(delegation_id, lambda r: r["state"] == "running", lambda r: r.update(
            state="unknown", completed_at=now, updated_at=now, event_json=event_json, result_json=result_json))

    def pending_rows(self) -> list[LedgerRow]:
        return self._select(
            lambda r: r["delivery_state"] == "pending" and r["state"] != "running" and r["event_json"] is not None,
            key=lambda r: (r["completed_at"], r["delegation_id"]))

    def undelivered_rows(self, session_id: str) -> list[LedgerRow]:
        sessions = ("origin_session", "parent_session_id", "origin_session_id")
        return self._select(lambda r: r["delivery_state"] == "pending" and session_id in (r[k] for k in sessions),
                            key=lambda r: (r["dispatched_at"], r["delegation_id"]))

    def settled_rows(self, limit: int) -> list[LedgerRow]:
        newest = self._select(lambda r: r["delivery_state"] in _SETTLED,
                              key=lambda r: (r["updated_at"], r["delegation_id"]), reverse=True)
        return newest[:max(0, int(limit))]

    def browse(self, query: Browse) -> list[LedgerRow]:
        newest = self._select(lambda r: browse_sql.keeps(query, r), key=lambda r: (r["dispatched_at"], r["delegation_id"]),
                              reverse=True)
        return newest[:query.limit]

    def finished_since(self, since: float) -> list[tuple[float, float, float | None, str]]:
        with self.store.lock:
            found = [(r["dispatched_at"], r["completed_at"], r["delivered_at"], r["state"])
                     for r in self.store.rows.values() if r["completed_at"] is not None and r["completed_at"] >= since]
        return sorted(found, key=lambda t: t[1])

    def get(self, delegation_id: str) -> LedgerRow | None:
        with self.store.lock:
            stored = self.store.rows.get(delegation_id)
            return decode_row(stored) if stored is not None else None

    # -- delivery claims -------------------------------------------------------------------------
    def claimed_rows(self) -> list[LedgerRow]:
        return self._select(lambda r: r["delivery_state"] == "pending" and r["delivery_claim"] is not None,
                            key=lambda r: (r["delivery_claimed_at"] or 0.0, r["delegation_id"]))

    def claim_delivery(self, delegation_id: str, claim: str, now: float, lease_s: float,
                       holder: tuple[int, int | None] | None = None) -> bool | None:
        def claimable(r: Row) -> bool:
            held = r["delivery_claim"] is not None and not (
                r["delivery_claimed_at"] is not None and r["delivery_claimed_at"] < now - lease_s)
            return r["delivery_state"] == "pending" and not held

        with self.store.lock:
            stored = self.store.rows.get(delegation_id)
            if stored is None:
                return None
            if not claimable(stored):
                return False
            pid, started = holder or (None, None)
            stored.update(delivery_claim=claim, delivery_claimed_at=now, delivery_attempts=stored["delivery_attempts"] + 1,
                          delivery_claim_pid=pid, delivery_claim_started_at=started)
            return True

    def complete_delivery(self, delegation_id: str, claim: str, now: float) -> bool:
        return self._change(delegation_id, _holds(claim), lambda r: r.update(
            delivery_state="delivered", delivered_at=now, updated_at=now, delivery_claim=None))

    def release_delivery(self, delegation_id: str, claim: str, now: float, max_attempts: int,
                         reason: str | None = None) -> str:
        outcome = [""]

        def release(r: Row) -> None:
            if r["delivery_attempts"] >= max_attempts:
                r.update(delivery_state="dropped", updated_at=now, delivery_claim=None, drop_reason=reason)
            else:
                r.update(delivery_claim=None, delivery_claimed_at=None, updated_at=now)
            outcome[0] = r["delivery_state"]

        self._change(delegation_id, _holds(claim), release)
        return outcome[0]

    def record_progress(self, delegation_id: str, claim: str, parts: int, now: float) -> bool:
        return self._change(delegation_id, _holds(claim), lambda r: r.update(delivery_progress=parts, updated_at=now))

    def defer_delivery(self, delegation_id: str, claim: str, now: float) -> bool:
        return self._change(delegation_id, _holds(claim), lambda r: r.update(
            delivery_claim=None, delivery_claimed_at=None, updated_at=now,
            delivery_attempts=max(0, r["delivery_attempts"] - 1)))

    def drop_delivery(self, delegation_id: str, claim: str | None, now: float, reason: str | None = None) -> bool:
        guard = _holds(claim) if claim is not None else (lambda r: r["delivery_state"] == "pending")
        return self._change(delegation_id, guard, lambda r: r.update(
            delivery_state="dropped", updated_at=now, delivery_claim=None, drop_reason=reason))

    def mark_delivered(self, delegation_id: str, now: float) -> bool:
        return self._change(delegation_id, lambda r: r["delivery_state"] != "delivered", lambda r: r.update(
            delivery_state="delivered", delivered_at=now, updated_at=now, delivery_claim=None, drop_reason=None))

    # -- housekeeping ------------------------------------------------------------------------------
    def prune(self, now: float, retention_s: float, max_settled: int) -> int:
        with self.store.lock:
            rows = self.store.rows
            settled = [r for r in rows.values() if r["delivery_state"] in _SETTLED]
            expired = {r["delegation_id"] for r in settled if r["updated_at"] < now - retention_s}
            kept = sorted((r for r in settled if r["delegation_id"] not in expired),
                          key=lambda r: (r["updated_at"], r["delegation_id"]), reverse=True)
            doomed = expired | {r["delegation_id"] for r in kept[max(0, max_settled):]}
            for delegation_id in doomed:
                gone = rows.pop(delegation_id)
                reason = stop_reason_of(gone.get("event_json"))
                self.store.pruned[(tallied_state(gone["state"], reason), gone["delivery_state"])] += 1
            if doomed:
                self._prune_side_records()
            return len(doomed)

    # -- helpers -------------------------------------------------------------------------------------
    def _change(self, delegation_id: str, guard: Callable[[Row], bool], change: Callable[[Row], Any]) -> bool:
        with self.store.lock:
            stored = self.store.rows.get(delegation_id)
            if stored is None or not guard(stored):
                return False
            change(stored)
            return True

    def _select(self, keep: Callable[[Row], bool], *, key: Callable[[Row], Any], reverse: bool = False) -> list[LedgerRow]:
        with self.store.lock:
            chosen = sorted((r for r in self.store.rows.values() if keep(r)), key=key, reverse=reverse)
            return [decode_row(r) for r in chosen]


def _holds(claim: str) -> Callable[[Row], bool]:
    return lambda r: r["delivery_state"] == "pending" and r["delivery_claim"] == claim
