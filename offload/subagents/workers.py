"""``delegation.run_on: workers``, the worker's side (``offload.subagents.queue`` is the parent's).

``start_claimed`` rebuilds a unit from the row an ``offload worker`` claimed and runs it through
the engine exactly as an in-process unit (heartbeats, stall monitor, each finished child
recorded durably at once, fenced terminal write, the spend budget its row carries), under the
same delegation id. The result
reaches the parent's host through the ledger (LISTEN/NOTIFY), as a new turn there.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from offload.engine.observers import continuing
from offload.engine.units import batch_spec
from offload.ledger import LedgerRow
from offload.subagents import lineage, resume
from offload.subagents.args import TaskArgs
from offload.subagents.budget import budget_from_spec
from offload.subagents.child import Batch
from offload.subagents.config import DelegationConfig
from offload.origin import Origin
from offload.subagents.dispatch import dispatch_unit
from offload.subagents.queue import queued_origin
from offload.subagents.tool import DelegateTool


def start_claimed(tool: DelegateTool, row: LedgerRow, parent: Any, cfg: DelegationConfig,
                  max_here: int) -> dict[str, Any]:
    """Run a unit this worker claimed, in the background on ``tool``'s engine; the engine's
    handle. Its children are built with this worker's credentials (``parent`` is the worker's
    own agent)."""
    spec = row.task or {}
    origin = queued_origin(row)
    try:
        unit = _rebuild(tool, spec, parent, cfg)
        resume.prepare(unit, row, tool.ledger())
    except Exception as exc:  # a spec this worker cannot run still ends as a reported result
        return _report_unrunnable(tool, row, spec, origin, f"{type(exc).__name__}: {exc}", max_here)
    with continuing(spec.get("trace_parent")):  # the unit span joins the dispatcher's trace
        return dispatch_unit(tool.engine, unit, row.delegation_id, origin, max_here, None, False,
                             spec.get("subagent_config"))


def _rebuild(tool: DelegateTool, spec: dict[str, Any], parent: Any, cfg: DelegationConfig) -> Batch:
    tasks = [TaskArgs.model_validate(t) for t in spec["tasks"]]
    indexes = [int(i) for i in spec.get("task_indexes") or range(len(tasks))]
    creds = tool.seams.resolve_credentials(cfg, parent)
    if spec.get("model"):
        creds["model"] = spec["model"]
    budget = budget_from_spec(spec.get("budget"), tool.spend)
    # A nested call's unit keeps its tree's root session, depth and ancestors' budgets here too.
    below = lineage.from_spec(spec.get("lineage"), tool.spend, cfg.max_concurrent_children, running=len(indexes))
    if below is not None:
        below = replace(below, budget=budget)
    # The children are built by the unit runner, on the pool thread that runs each (as in-process).
    return tool.batch(tasks=tasks, children=[None] * len(indexes), parent=parent, cfg=cfg, creds=creds,
                      context=spec.get("context"), role=spec.get("role") or "leaf", indexes=indexes,
                      group=spec.get("group"), budget=budget, lineage=below,
                      child_max_iterations=int(spec.get("max_iterations") or cfg.max_iterations))


def _report_unrunnable(tool: DelegateTool, row: LedgerRow, spec: dict[str, Any], origin: Origin,
                       error: str, max_here: int) -> dict[str, Any]:
    goals = [str(g) for g in spec.get("goals") or []] or ["(unreadable queued unit)"]
    indexes = spec.get("task_indexes") or list(range(len(goals)))
    failed = resume.unresumable_entries(spec, indexes, error) or [
        {"task_index": i, "status": "failed", "summary": None, "error": f"the worker could not run it: {error}"}
        for i in indexes]
    unit = batch_spec(goals, indexes, role="leaf", model=spec.get("model"), delegation_id=row.delegation_id,
                      subagent_config=spec.get("subagent_config"), origin=origin)
    return tool.engine.dispatch(unit, lambda: {"results": failed}, max_here)
