"""Resume, not restart: a background unit run by offload's own agent loop continues from its
children's last logged steps after its owner died (issue 44).

Three moments:

- dispatch (``durable_mark``): with ``delegation.resume: auto``, a unit whose children are built
  and run by offload's defaults (no injected ``run_child`` / ``build_child``: the compat
  adapter's, ``hooks.run_child``, a patched runner; a parent that is offload's ``AIAgent``) carries the ``durable`` mark in its ledger task: its queue form
  (``queue.unit_spec``: goals, tasks, settings, no credentials) and how often it was resumed.
  Its children write their steps (``offload.agent.step_log``) through ``step_writer``.
- recovery (``resume_task``): a long-lived process that finds the unit's owner dead asks here
  what to do. With the mark, ``delegation.resume: auto`` and fewer than ``max_resumes``
  resumes, the unit goes back to the admission queue (``requeue_for_resume``) with what the
  next owner needs: each finished child's entry (kept, never re-run), the dead owner, the
  resume count. Else it is settled ``unknown`` as before, its reason in the event.
- start (``prepare``): the admission queue adopts the row like any queued row of a dead owner
  (``workers.start_claimed``, with the taker's own credentials; a taker in another workspace, or
  without a key where the dead owner's children had one, settles the unfinished children
  ``unknown`` saying so); the rebuilt unit gets the
  finished entries and each unfinished child's steps, and each child continues from its replay.
  The dead owner's pending approval requests of the unit are withdrawn (``withdraw_approvals``):
  a command waiting for approval had not started (its start mark is written only once it is
  approved), so the resumed child runs the call again and asks again.

Invariant: a side-effecting call with a start mark and no result is never run again (the
replay answers it with ``step_log.HOST_DIED``); a model call in flight at the death is issued
again; rows without the mark are never touched here.
"""
from __future__ import annotations

import functools
import time
from typing import Any

from offload.ledger import LedgerRow
from offload.ledger.protocol import local_host
from offload.origin import Origin

MARK = "durable"
WITHDRAWN_BY = "resume: its owner died while it waited; the resumed child asks again"


def durable_mark(unit: Any, origin: Origin, resumes: int = 0) -> dict[str, Any] | None:
    """The ledger task's ``durable`` value for ``unit`` (None: its children are not run by offload's
    own loop: an injected runner or builder, or a parent that is not an ``AIAgent``, whose
    ``build_child`` may make anything)."""
    from offload.agent.core import AIAgent
    from offload.subagents.child import build_child_agent, run_single_child
    from offload.subagents.queue import unit_spec

    if (unit.run_child is not run_single_child or unit.build_child is not build_child_agent
            or not isinstance(unit.parent, AIAgent) or unit.cfg.resume != "auto"):
        return None  # (with ``delegation.resume: never`` no step is logged at all)
    workspace = getattr(unit.parent, "workspace", None)
    # ``keyed``: whether its children called their endpoint with a key (never the key: credentials
    # come from the taker's own configuration, and ``prepare`` refuses a taker that has none).
    mark = {"spec": unit_spec(unit, origin), "resumes": resumes, "workspace": str(workspace) if workspace else None,
            "keyed": bool((unit.creds or {}).get("api_key"))}
    if unit.resumed:  # a resumed unit's row keeps saying so while it runs (``render.resumed.unit_resumed``)
        mark.update({k: unit.resumed.get(k) for k in ("after", "first_dispatched_at", "at")})
    return mark


def step_writer(engine: Any, unit_id: str) -> Any:
    """``writer(task_index, [(seq, kind, payload), ...])`` for the unit's children: each call one
    ledger write (``StepLog``'s ``write_many``)."""
    return functools.partial(engine.record_steps, unit_id)


def resume_task(row: LedgerRow, cfg: Any, *, handing_over: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """``(queued task, None)`` to resume ``row``; ``(None, why not)`` for a marked row that is
    settled ``unknown`` instead; ``(None, None)`` for a row without the mark (recovered as before).
    ``handing_over``: its live owner gives it away (a client closed), which is no death: it is
    counted in ``handovers``, never against ``delegation.max_resumes`` (that bounds a unit whose
    owners keep dying: one that may be what kills them)."""
    task = row.task if isinstance(row.task, dict) else {}
    mark = task.get(MARK)
    if not isinstance(mark, dict) or not isinstance(mark.get("spec"), dict):
        return None, None
    if cfg.resume == "never":
        return None, "delegation.resume is `never`, so a unit whose owner died is not resumed"
    resumes = int(mark.get("resumes") or 0)
    if resumes >= cfg.max_resumes and not handing_over:
        return None, (f"it was resumed {resumes} time(s), delegation.max_resumes is {cfg.max_resumes}; raise it "
                      "to let it continue again")
    recorded = [r for r in ((row.result or {}).get("results") or []) if isinstance(r, dict)]
    # The dead owner: its pid, its host (a shared ledger stamps it; a single-host ledger's owners
    # all ran here) and its last write to the row (its last step's may be later: ``prepare``).
    after = {"pid": row.owner_pid, "host": (row.extra or {}).get("owner_host") or local_host(),
             "last_write_at": row.updated_at}
    first = mark.get("first_dispatched_at") or row.dispatched_at  # a new owner's dispatch writes its own
    queued = {**mark["spec"], "run_on": "local", "owner_cwd": task.get("owner_cwd"),
              MARK: {**mark, "resumes": resumes + (0 if handing_over else 1), "recorded": recorded, "after": after,
                     "first_dispatched_at": first}}
    if handing_over:
        queued[MARK]["handovers"] = int(mark.get("handovers") or 0) + 1
    if task.get("slot_key"):
        queued["slot_key"] = task["slot_key"]
    return queued, None


def handed_task(row: LedgerRow, cfg: Any) -> dict[str, Any] | None:
    """The queued task a live owner hands ``row`` over with (``offload.owner.handover``): as a resume's,
    the leaving owner named and marked ``handed_over``; None if it cannot be resumed."""
    queued, _ = resume_task(row, cfg, handing_over=True)
    if not queued:
        return None
    mark = queued[MARK]
    return {**queued, MARK: {**mark, "after": {**mark["after"], "handed_over": True}}}


def handed_over(row: LedgerRow) -> bool:
    """Whether a queued row was handed over by a live owner (any long-lived process takes it)."""
    mark = (row.task or {}).get(MARK) if isinstance(row.task, dict) else None
    return isinstance(mark, dict) and bool((mark.get("after") or {}).get("handed_over"))


def workspace_of(row: LedgerRow) -> str | None:
    """The folder a resumable row's children worked in (None: not recorded)."""
    mark = (row.task or {}).get(MARK) if isinstance(row.task, dict) else None
    return mark.get("workspace") if isinstance(mark, dict) else None


def prepare(unit: Any, row: LedgerRow, ledger: Any) -> None:
    """Give a unit rebuilt from a resumed row what its children continue from."""
    mark = (row.task or {}).get(MARK) if isinstance(row.task, dict) else None
    if not isinstance(mark, dict) or "recorded" not in mark:
        return  # a fresh queued unit, not a resumed one
    ran_in, here = mark.get("workspace"), getattr(unit.parent, "workspace", None)
    if ran_in and here is not None and str(here) != ran_in:
        raise RuntimeError(f"its children worked in {ran_in} and the process that took it over works in {here}; "
                           "a unit is resumed only by an offload process whose workspace is the one it ran in")
    creds = unit.creds or {}
    if mark.get("keyed") and not creds.get("api_key"):
        endpoint = creds.get("base_url") or "the model endpoint"
        raise RuntimeError(f"its children called {endpoint} with an API key and the process that took it over has "
                           "none; a unit is resumed only by an offload process that has the key (api_key_env or "
                           "OFFLOAD_API_KEY in its environment, or delegation.api_key_env)")
    # A child that finished before the death keeps its entry as it was: it was not resumed.
    unit.recorded = {int(e["task_index"]): dict(e) for e in mark.get("recorded") or []
                     if isinstance(e.get("task_index"), int)}
    steps: dict[int, list[Any]] = {}
    for step in ledger.read_steps(row.delegation_id):
        steps.setdefault(step.task_index, []).append(step)
    unit.resume_steps = steps
    withdraw_approvals(ledger, row.delegation_id)
    after = dict(mark.get("after") or {})
    last = [s.written_at for kept in steps.values() for s in kept] + [after.get("last_write_at") or 0.0]
    after["last_write_at"] = max(last) or None  # the dead owner's last sign of life in the ledger
    unit.resumed = {"resumes": int(mark.get("resumes") or 1), "after": after, "at": time.time(),
                    "first_dispatched_at": mark.get("first_dispatched_at") or row.dispatched_at}


def withdraw_approvals(ledger: Any, delegation_id: str) -> list[str]:
    """Decide the dead owner's pending approval requests of this unit ``denied`` by ``resume``: no
    child waits on them any more (their command never started, so the resumed child asks again
    with a new request), and an answer to the old one would move nothing. Returns their ids."""
    from offload.subagents.approvals import ApprovalError, decide, pending

    withdrawn = []
    for request in pending(ledger):
        if request.get("delegation_id") == delegation_id:
            try:
                decide(ledger, request["request_id"], allow=False, by=WITHDRAWN_BY)
                withdrawn.append(request["request_id"])
            except ApprovalError:  # answered in the same instant: nobody waits on it either way
                pass
    return withdrawn


def unresumable_entries(task: dict[str, Any], indexes: list[int], why: str) -> list[dict[str, Any]] | None:
    """The result of a resumed unit that ``prepare`` refused (a workspace this process cannot
    provide): each finished child's recorded entry kept, every other child ``unknown`` saying
    why; None for a unit that is not a resumed one."""
    mark = task.get(MARK)
    if not isinstance(mark, dict) or "recorded" not in mark:
        return None
    kept = {e["task_index"]: e for e in mark.get("recorded") or [] if isinstance(e.get("task_index"), int)}
    return [kept.get(i) or {"task_index": i, "status": "unknown", "summary": None, "error": f"Not resumed: {why}"}
            for i in indexes]


def resumed_info(replayed: Any, unit: Any) -> dict[str, Any]:
    """What a resumed child continues from (``docs/vocabulary.md``, the child's ``resumed``, but
    ``model_calls_reissued``): after which owner died, from which step, what was answered for
    it. ``replayed`` is None for a child that had logged no step: it was in its first model call
    (or about to make it), so it starts over from step 0."""
    info = dict(getattr(unit, "resumed", None) or {})
    info.pop("first_dispatched_at", None)  # the unit's, not the child's
    if replayed is not None:
        info.update(from_step=replayed.next_seq, replies_kept=replayed.replies,
                    unknown_calls=list(replayed.unknown_calls), calls_rerun=len(replayed.to_run))
    else:
        info.update(from_step=0, replies_kept=0, unknown_calls=[], calls_rerun=0)
    return info


def resumed_entry(entry: dict[str, Any], replayed: Any, unit: Any) -> dict[str, Any]:
    """A resumed child's result entry says so: ``resumed_info`` and how many model calls were
    issued twice (the one in flight at the death, issued again by this owner's first call)."""
    info = resumed_info(replayed, unit)
    in_flight = replayed is None or replayed.model_call_in_flight
    api_calls = entry.get("api_calls")
    made_one = isinstance(api_calls, int) and api_calls > 0  # it did issue its next model call here
    info["model_calls_reissued"] = 1 if in_flight and made_one else 0
    return {**entry, "resumed": info}


def span_attributes(info: Any) -> dict[str, Any]:
    """A resumed child's ``resumed`` as span attributes (``offload.resumed``, ``offload.resume.*``;
    ``docs/telemetry.md``); nothing for a child that was not resumed."""
    if not isinstance(info, dict):
        return {}
    after = info.get("after") or {}
    return {"resumed": True, "resume.resumes": info.get("resumes"), "resume.from_step": info.get("from_step"),
            "resume.after_pid": after.get("pid"), "resume.after_host": after.get("host"),
            "resume.after_last_write_at": after.get("last_write_at"),
            "resume.model_calls_reissued": info.get("model_calls_reissued"),
            "resume.unknown_calls": tuple(info.get("unknown_calls") or ()), "resume.calls_rerun": info.get("calls_rerun")}
