"""``delegation.run_on: workers``, the parent's side: a background call's units become
``queued`` rows in the shared ledger for ``offload worker`` processes on any host
(``offload.subagents.workers`` is the worker's side). Nothing runs here.

A queued row's task JSON is the unit's spec -- goals, per-task context and toolsets, role,
model, task indexes, group, the subagents' iteration budget and spend caps and the routing that
brings the result back to the parent's session. API keys never go through the database: a worker builds
children with its own credentials, using the spec's model name. Units are duck-typed
``delegate_tool.Batch`` objects, so this module imports nothing of delegate_tool (no cycle).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from offload.engine.observers import trace_carrier
from offload.ledger import DispatchRow, LedgerError
from offload.origin import IDENTITY_KEYS, Origin
from offload.subagents.child import unit_stamp
_NOTE = ("Queued for an `offload worker` host (delegation.run_on: workers). Each result arrives as a new message "
         "after you END YOUR TURN; do not poll or wait for it. Tell the user what you started and carry on.")


def needs_shared_ledger(ledger: Any) -> str | None:
    """Why ``ledger`` cannot hold a work queue (and how to fix it), or None."""
    if hasattr(type(ledger), "claim_queued_unit"):  # every ledger queues; only a shared one has workers
        return None
    return (f"delegation.run_on is `workers`, but the ledger here is {ledger.location}, which no worker on another host "
            "can read; point every host at one PostgreSQL database with `offload config set ledger.url "
            "postgresql://USER:PASSWORD@HOST:PORT/DB` (or OFFLOAD_LEDGER_URL), or `offload config set "
            "delegation.run_on local`")


def unit_spec(unit: Any, origin: Origin) -> dict[str, Any]:
    """What a worker needs to run ``unit`` (JSON; no credentials). ``origin`` travels whole (added
    by ``DispatchRow.of``); ``routing`` is the same facts in the form a previous worker reads."""
    return {"goals": unit.goals, "tasks": [t.model_dump(exclude_none=True) for t in unit.tasks],
            "context": unit.context, "role": unit.role, "model": unit.creds.get("model"),
            "task_indexes": list(unit.indexes), "group": unit.group, "max_iterations": unit.child_max_iterations,
            "is_batch": True, "run_on": "workers", "subagent_config": unit_stamp(unit),
            "routing": legacy_routing(origin),
            **({"budget": unit.budget.to_spec()} if getattr(unit, "budget", None) is not None else {}),
            **({"lineage": unit.lineage.to_spec()} if getattr(unit, "lineage", None) is not None else {}),
            "trace_parent": trace_carrier()}  # the worker's unit span joins the dispatcher's trace


def legacy_routing(origin: Origin) -> dict[str, Any]:
    flat = origin.flat()
    return {**{k: flat[k] for k in ("session_key", "parent_session_id", "origin_ui_session_id", "origin_session_id")},
            "origin": {k: flat[k] for k in IDENTITY_KEYS if k in flat}}


def queued_origin(row: Any) -> Origin:
    """The origin of a queued row: carried whole, or (queued by a previous version) its routing."""
    spec = row.task if isinstance(row.task, dict) else {}
    if "origin" in spec or not isinstance(spec.get("routing"), dict):
        return row.origin
    routing = spec["routing"]
    identity = routing.get("origin") if isinstance(routing.get("origin"), dict) else {}
    return Origin.from_flat({**routing, **identity}, session_key=routing.get("session_key") or row.origin_session)


def queue_units(ledger: Any, new_id: Callable[[], str], batch: Any, units: list[Any],
                origin: Origin) -> dict[str, Any]:
    """Queue each of ``units`` (the completion units of ``batch``) in ``ledger`` for the workers,
    under ids from ``new_id``; the handle the parent agent gets."""
    problem = needs_shared_ledger(ledger)
    if problem:
        return {"status": "error", "error": problem}
    call_id = new_id()
    handles = []
    for k, unit in enumerate(units):
        unit_id = call_id if len(units) == 1 else f"{call_id}-{k + 1}"
        now = time.time()
        row = DispatchRow.of(unit_id, origin, now, unit_spec(unit, origin))
        try:
            ledger.enqueue_unit(row, now)
        except LedgerError as exc:
            done = f" ({len(handles)} unit(s) before it were queued and will run)" if handles else ""
            return {"status": "error", "error": f"could not queue the work for the workers: {exc}{done}"}
        handles.append({"delegation_id": unit_id, "group": unit.group, "task_indexes": unit.indexes})
    handle: dict[str, Any] = {"status": "dispatched", "mode": "background", "run_on": "workers",
                              "count": len(batch.tasks), "delegation_id": handles[0]["delegation_id"],
                              "goals": batch.goals, "note": _NOTE}
    if len(units) > 1:
        handle["units"] = handles
    return handle
