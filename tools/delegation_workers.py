"""``delegation.run_on: workers``: background units queued in the shared ledger and run by
``offload worker`` processes on any host.

Queue side (the parent's host): each unit of a background call becomes a ``queued`` ledger row
whose task JSON is the unit's spec -- goals, per-task context and toolsets, role, model, task
indexes, group and the routing that brings the result back to the parent's session. Nothing
runs here. API keys never go through the database: a worker builds children with its own
credentials (its config.yaml / environment), using the spec's model name.

Worker side: ``start_claimed`` rebuilds the unit from a claimed row and runs it through the
engine exactly as an in-process unit (heartbeats, stall monitor, each finished child recorded
durably at once, fenced terminal write), under the same delegation id. The result reaches the
parent's host through the ledger (LISTEN/NOTIFY), as a new turn there.
"""
from __future__ import annotations

import time
from typing import Any

from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from tools import delegate_tool as dt
from tools.async_delegation_ledger import DispatchRow, LedgerError, LedgerRow
from tools.delegate_config import DelegationConfig

ROUTING_KEYS = ("session_key", "parent_session_id", "origin_ui_session_id", "origin_session_id", "origin")
_NOTE = ("Queued for an `offload worker` host (delegation.run_on: workers). Each result arrives as a new message "
         "after you END YOUR TURN; do not poll or wait for it. Tell the user what you started and carry on.")


def needs_shared_ledger(ledger: Any) -> str | None:
    """Why ``ledger`` cannot hold a work queue (and how to fix it), or None."""
    if hasattr(type(ledger), "enqueue_unit"):
        return None
    return (f"delegation.run_on is `workers`, but the ledger here is {ledger.location}, which no worker on another host "
            "can read; point every host at one PostgreSQL database with `offload config set ledger.url "
            "postgresql://USER:PASSWORD@HOST:PORT/DB` (or OFFLOAD_LEDGER_URL), or `offload config set "
            "delegation.run_on local`")


def unit_spec(unit: dt.Batch, routing: dict[str, Any]) -> dict[str, Any]:
    """What a worker needs to run ``unit`` (JSON; no credentials)."""
    return {"goals": unit.goals, "tasks": [t.model_dump(exclude_none=True) for t in unit.tasks],
            "context": unit.context, "role": unit.role, "model": unit.creds.get("model"),
            "task_indexes": list(unit.indexes), "group": unit.group, "max_iterations": unit.child_max_iterations,
            "is_batch": True, "run_on": "workers",
            "routing": {k: routing.get(k) for k in ROUTING_KEYS}}


def queue_background(batch: dt.Batch, routing: dict[str, Any]) -> dict[str, Any]:
    """Queue each unit of ``batch`` for the workers; the handle the parent agent gets."""
    from tools.delegate_tool_dispatch import _units_of

    ledger = delivery.current_ledger()
    problem = needs_shared_ledger(ledger)
    if problem:
        return {"status": "error", "error": problem}
    units = _units_of(batch)
    call_id = ad._new_delegation_id()
    handles = []
    for k, unit in enumerate(units):
        unit_id = call_id if len(units) == 1 else f"{call_id}-{k + 1}"
        now = time.time()
        row = DispatchRow(unit_id, routing["session_key"], now, unit_spec(unit, routing),
                          origin_ui_session_id=routing.get("origin_ui_session_id") or "",
                          origin_session_id=routing.get("origin_session_id") or "",
                          parent_session_id=routing.get("parent_session_id"))
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


def start_claimed(row: LedgerRow, parent: Any, cfg: DelegationConfig, max_here: int) -> dict[str, Any]:
    """Run a unit this worker claimed, in the background; the engine's handle. Its children are
    built with this worker's credentials (``parent`` is the worker's own agent)."""
    from tools.delegate_tool_dispatch import _dispatch_unit

    spec = row.task or {}
    routing = {k: (spec.get("routing") or {}).get(k) for k in ROUTING_KEYS}
    routing.update(session_key=routing["session_key"] or row.origin_session, origin=routing["origin"] or {})
    try:
        unit = _rebuild(spec, parent, cfg)
    except Exception as exc:  # a spec this worker cannot run still ends as a reported result
        return _report_unrunnable(row, spec, routing, f"{type(exc).__name__}: {exc}", max_here)
    return _dispatch_unit(unit, row.delegation_id, routing, max_here, None, False)


def _rebuild(spec: dict[str, Any], parent: Any, cfg: DelegationConfig) -> dt.Batch:
    tasks = [dt.TaskArgs.model_validate(t) for t in spec["tasks"]]
    indexes = [int(i) for i in spec.get("task_indexes") or range(len(tasks))]
    creds = dt._resolve_delegation_credentials(cfg, parent)
    if spec.get("model"):
        creds["model"] = spec["model"]
    # The children are built by the unit runner, on the pool thread that runs each (as in-process).
    return dt.Batch(tasks=tasks, children=[None] * len(indexes), parent=parent, cfg=cfg, creds=creds,
                    context=spec.get("context"), role=spec.get("role") or "leaf", indexes=indexes,
                    group=spec.get("group"), child_max_iterations=int(spec.get("max_iterations") or cfg.max_iterations))


def _report_unrunnable(row: LedgerRow, spec: dict[str, Any], routing: dict[str, Any], error: str,
                       max_here: int) -> dict[str, Any]:
    goals = [str(g) for g in spec.get("goals") or []] or ["(unreadable queued unit)"]
    indexes = spec.get("task_indexes") or list(range(len(goals)))
    failed = [{"task_index": i, "status": "failed", "summary": None, "error": f"the worker could not run it: {error}"}
              for i in indexes]
    return ad.dispatch_async_delegation_batch(
        goals=goals, context=None, toolsets=None, role="leaf", model=spec.get("model"),
        session_key=routing["session_key"], parent_session_id=routing["parent_session_id"],
        origin_ui_session_id=routing["origin_ui_session_id"] or "", origin_session_id=routing["origin_session_id"] or "",
        runner=lambda: {"results": failed}, max_async_children=max_here, delegation_id=row.delegation_id,
        task_indexes=indexes, origin=routing["origin"])
