"""Running a delegate_task call: background fan-out through the engine, or synchronously.

Background: a call becomes completion units — one per call by default, or one per group and
per ungrouped task with ``delegation.independent_completions`` — dispatched with one shared
``slot_key`` so splitting never uses more capacity. Each unit runner records every finished
child in the ledger at once (before any post-processing), so a crash costs only the children
that had not finished. If the first unit is refused at capacity, ``delegation.at_capacity``
decides: the whole call waits in the admission queue (``offload.subagents.admission``), is
refused, or runs synchronously with a note saying so. Whether a call may go to the background
at all is decided by ``capture_origin``: a push channel, or a stateless one that can be woken
at a raw session id; only a channel that can never be reached later runs inline. Inline children's usage is
rolled into the parent when the call returns.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Protocol

from offload.engine.units import batch_spec
from offload.origin import Origin
from offload.subagents import children as kids
from offload.subagents import resume
from offload.subagents.child import Batch, str_attr, unit_stamp
from offload.subagents.usage import roll_up, sum_usage

if TYPE_CHECKING:
    from offload.engine.engine import Delegations


class AdmissionQueue(Protocol):
    """What a call at capacity asks of the runtime's admission queue (``admission.Admission``,
    which dispatches the calls it admits through this module): named here, where it is used, so
    neither this module nor the tool knows the queue's."""

    def waiting_here(self) -> bool: ...

    def queue_call(self, call_id: str, units: list[Batch], origin: Origin) -> dict[str, Any]: ...

    def reclaim_dead(self) -> bool: ...


_NOTES = {
    "background": ("Running in the background. Each result arrives as a new message after you END YOUR TURN; "
                   "do not poll or wait for it. Tell the user what you started and carry on."),
    "no_async": ("Background delivery is not available in this session (one-shot or stateless channel), so the "
                 "subagents ran synchronously; their results are below."),
    "at_capacity": ("The background pool was full (delegation.max_concurrent_children={cap}), so this batch ran "
                    "synchronously (delegation.at_capacity: inline); its results are below. Raise the key to allow "
                    "more background work."),
}


def capture_origin(parent: Any) -> Origin | None:
    """Who the results belong to, or None when this turn's channel can never be reached later
    (a one-shot run: the call runs inline). Must run before children are built: it reads the
    turn's session context, once; everything after carries the ``Origin`` whole."""
    from offload.context.approval import get_current_session_key
    from offload.context.session_env import get_session_env, resolve_wake_session

    wake_sid = resolve_wake_session()  # a raw session id when the channel is stateless but wakeable
    if wake_sid is None:
        return None
    parent_sid = str_attr(parent, "session_id")
    session_key = get_current_session_key(default="")
    if get_session_env("HERMES_SESSION_SOURCE", "") == "tui" and parent_sid:
        session_key = parent_sid  # compression may have rotated the id since the turn began
    return Origin.capture(session_key or parent_sid or "", parent_sid,
                          ui_session_id=get_session_env("HERMES_UI_SESSION_ID", ""), wake_session_id=wake_sid,
                          scope_id=get_session_env("HERMES_SESSION_SCOPE_ID", ""),
                          user_id=get_session_env("HERMES_SESSION_USER_ID", ""),
                          user_name=get_session_env("HERMES_SESSION_USER_NAME", ""))


def units_of(batch: Batch) -> list[Batch]:
    if not batch.cfg.independent_completions:
        return [batch]
    plan: list[tuple[str | None, list[int]]] = []  # in order of first appearance
    groups: dict[str, list[int]] = {}
    for i in batch.indexes:
        group = batch.tasks[i].group
        if group is None:
            plan.append((None, [i]))
        elif group in groups:
            groups[group].append(i)
        else:
            groups[group] = [i]
            plan.append((group, groups[group]))
    return [replace(batch, indexes=indexes, group=group, children=[None] * len(indexes),
                    cancelled=threading.Event()) for group, indexes in plan]


def dispatch_background(engine: Delegations, batch: Batch, origin: Origin,
                        admission: AdmissionQueue | None = None, *, reclaimed: bool = False) -> dict[str, Any]:
    """Start ``batch``'s units in the background; at capacity, once, first reclaim the slots of
    owners that died (``Admission.reclaim_dead``), then follow ``delegation.at_capacity``."""
    units = units_of(batch)
    call_id = engine.new_id()
    if admission is not None and batch.cfg.at_capacity == "queue" and admission.waiting_here():
        return admission.queue_call(call_id, units, origin)  # behind the units already waiting
    handles, inline, slot_key = [], [], None
    try:
        for k, unit in enumerate(units):
            unit_id = call_id if len(units) == 1 else f"{call_id}-{k + 1}"
            # The first unit holds the call's slot until every unit is out, so a fast first
            # unit that finishes meanwhile cannot leave its siblings to be refused at capacity.
            res = dispatch_unit(engine, unit, unit_id, origin, batch.cfg.max_concurrent_children, slot_key,
                                 hold_slot=slot_key is None and len(units) > 1)
            if res["status"] == "dispatched":
                slot_key = slot_key or unit_id
                handles.append({"delegation_id": unit_id, "group": unit.group, "task_indexes": unit.indexes})
            elif k == 0:
                if res.get("at_capacity") and admission is not None and not reclaimed and admission.reclaim_dead():
                    return dispatch_background(engine, batch, origin, admission, reclaimed=True)
                return at_capacity(batch, res, admission, call_id, units, origin)
            else:  # a later unit can only fail to schedule, never at capacity: run it here
                inline.extend(kids.run_children(unit, None, honor_parent_interrupt=True))
    finally:
        if slot_key is not None and len(units) > 1:
            engine.release_slot_hold(slot_key)
    handle: dict[str, Any] = {"status": "dispatched", "mode": "background", "count": len(batch.tasks),
                              "delegation_id": handles[0]["delegation_id"], "goals": batch.goals,
                              "note": _NOTES["background"]}
    if len(units) > 1:
        handle["units"] = handles
    if inline:
        handle["inline_results"] = batch.finalize_results(inline, batch)
        handle["usage"] = sum_usage(handle["inline_results"])
        roll_up(batch.parent, handle["usage"])
    return handle


def at_capacity(batch: Batch, refusal: dict[str, Any], admission: AdmissionQueue | None, call_id: str,
                units: list[Batch], origin: Origin) -> dict[str, Any]:
    """What a call whose first unit the engine refused does (``delegation.at_capacity``): wait
    in the admission queue, come back as an error, or run inline. A refusal that is not about
    capacity (the pool is shut down) runs inline, as before."""
    mode = batch.cfg.at_capacity if refusal.get("at_capacity") else "inline"
    if mode == "refuse":
        return {"status": "error", "error": f"{refusal['error']} (delegation.at_capacity is `refuse`; with `queue` "
                "the call would wait for a free slot)"}
    if mode == "queue" and admission is not None:
        return admission.queue_call(call_id, units, origin)
    return run_sync(batch, note="at_capacity")


def dispatch_unit(engine: Delegations, unit: Batch, unit_id: str, origin: Origin, cap: int,
                  slot_key: str | None, hold_slot: bool, subagent_config: dict[str, Any] | None = None):
    """``subagent_config``: the stamp for the unit's events; default: from the unit's own config
    (a worker passes the stamp the dispatching host queued, whose config chose the model)."""
    whole_call = unit.indexes == list(range(len(unit.tasks)))
    unit.delegation_id = unit_id
    if unit.approvals is not None:  # its requests are listed under the session the result goes to
        unit.approvals = replace(unit.approvals, session_key=origin.parent_session_id or origin.session_key
                                 or unit.approvals.session_key)
    durable = resume.durable_mark(unit, origin, (unit.resumed or {}).get("resumes", 0))
    if durable is not None:
        unit.step_writer = resume.step_writer(engine, unit_id)
    spec = batch_spec(unit.goals, None if whole_call else unit.indexes, context=unit.context, role=unit.role,
                      model=unit.creds.get("model"), delegation_id=unit_id, slot_key=slot_key, group=unit.group,
                      subagent_config=subagent_config or unit_stamp(unit), origin=origin, durable=durable)
    return engine.dispatch(spec, _unit_runner(engine, unit, unit_id), cap, interrupt_fn=lambda: kids.stop(unit),
                           progress_fn=kids.progress_token(unit.children), transcript_fn=kids.transcript_reader(unit),
                           hold_slot=hold_slot)


def _unit_runner(engine: Delegations, unit: Batch, unit_id: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        started = time.monotonic()
        entries = kids.run_children(unit, lambda entry: engine.record_unit_child(unit_id, entry))
        out: dict[str, Any] = {"results": unit.finalize_results(entries, unit),
                               "total_duration_seconds": round(time.monotonic() - started, 2)}
        if unit.group:
            out["group"] = unit.group
        return out
    return run


def run_sync(batch: Batch, note: str | None = None) -> dict[str, Any]:
    started = time.monotonic()
    entries = kids.run_children(batch, None, honor_parent_interrupt=True)
    results = batch.finalize_results(entries, batch)
    out: dict[str, Any] = {"status": "completed", "mode": "sync", "goals": batch.goals, "results": results,
                           "usage": sum_usage(results),
                           "total_duration_seconds": round(time.monotonic() - started, 2)}
    roll_up(batch.parent, out["usage"])  # inline children count now; background ones on delivery
    if note:
        out["note"] = _NOTES[note].format(cap=batch.cfg.max_concurrent_children)
    return out
