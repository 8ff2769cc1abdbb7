"""One delegate_task unit (``Batch``) and what happens to one child of it: built by the parent
(``build_child_agent``), run to the end (``run_single_child``), or described without running
(``fabricated_entry``); and the public result entries of finished children
(``finalize_child_results``). The lowest layer of the subagents modules: ``children``,
``dispatch`` and ``tool`` import it, it imports none of them.

A unit carries its seams (``build_child``, ``run_child``, ``finalize_results``); the defaults
are the functions here, and a runtime may pass others (the hermes adapter passes ones that look
up its patchable names at call time, so a patch there reaches every unit). Invariants: a child
that raised is ``error``, one that ran and did not succeed ``failed``; a child whose work
stopped unfinished (iteration budget, cut-off reply) is ``truncated``.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from offload.subagents.args import TaskArgs
from offload.subagents.config import DelegationConfig
from offload.render.model_rejection import subagent_stamp
from offload.render.truncation import BUDGET_EXIT_REASONS, CUT_OFF_EXIT_REASON, UNFINISHED_EXIT_REASONS
from offload.subagents.usage import entry_usage_fields


def str_attr(obj: Any, name: str) -> str | None:
    value = getattr(obj, name, None)
    return value if isinstance(value, str) and value else None


def build_child_agent(*, task_index: int, goal: str, context: str | None, toolsets: list[str] | None, role: str,
                      creds: dict[str, Any], max_iterations: int, parent_agent: Any) -> Any:
    """The parent builds its own child, so tools/ never imports the agent runtime."""
    # Only when set: a parent that predates the setting (or a test double) need not know it.
    extra = {"stream_idle_timeout_s": creds["stream_idle_timeout_s"]} if creds.get("stream_idle_timeout_s") else {}
    return parent_agent.build_child(task_index=task_index, goal=goal, context=context, toolsets=toolsets, role=role,
                                    model=creds.get("model"), base_url=creds.get("base_url"),
                                    api_key=creds.get("api_key"), max_iterations=max_iterations,
                                    subagent_id=f"sa-{task_index}-{os.urandom(3).hex()}", **extra)


def child_prompt(goal: str, context: str | None) -> str:
    return f"{goal}\n\nContext from the parent agent:\n{context}" if context else goal


def run_single_child(task_index: int, goal: str, child: Any = None, parent_agent: Any = None,
                     context: str | None = None, **_: Any) -> dict[str, Any]:
    """Run one child to the end and describe the outcome as a result entry."""
    started = time.monotonic()
    replayed = getattr(child, "resume_from", None)  # a resumed child (``subagents.resume``)
    try:
        if replayed is not None:
            out = child.resume_conversation(replayed.messages, replayed.to_run)
        else:
            out = child.run_conversation(child_prompt(goal, context))
    except Exception as exc:  # raised, as opposed to ran and failed: status "error"
        return fabricated_entry(task_index, "error", f"{type(exc).__name__}: {exc}", child, started)
    summary = out.get("final_response")
    usable = isinstance(summary, str) and summary.strip() not in ("", "(empty)")
    if out.get("interrupted") or out.get("exit_reason") == "interrupted":
        status, exit_reason = "interrupted", "interrupted"
    elif out.get("exit_reason") in BUDGET_EXIT_REASONS:  # stopped, with what it had: shown as partial output
        status, exit_reason = "interrupted", out["exit_reason"]
    elif out.get("error") or out.get("exit_reason") == "error":
        status, exit_reason = "failed", "error"
    else:
        exit_reason = out.get("exit_reason") if out.get("exit_reason") in UNFINISHED_EXIT_REASONS else None
        exit_reason = "completed" if out.get("completed") else exit_reason or "max_iterations"
        status = "completed" if usable else "failed"
    entry = {"task_index": task_index, "status": status, "summary": summary if usable else None,
             "api_calls": int(out.get("api_calls") or 0), "duration_seconds": round(time.monotonic() - started, 2),
             "model": out.get("model") or str_attr(child, "model"), "exit_reason": exit_reason,
             "truncated": exit_reason in UNFINISHED_EXIT_REASONS, **entry_usage_fields(out)}
    if exit_reason == CUT_OFF_EXIT_REASON:
        entry["finish_reason"] = out.get("finish_reason")
    if out.get("error_kind"):  # "model" / "endpoint": what `offload run` exits with if no child completed
        entry["error_kind"] = out["error_kind"]
    if out.get("error"):
        entry["error"] = str(out["error"])
    elif status == "failed":
        entry["error"] = "the subagent ended without a usable summary"
    entry.update(trace_fields(out.get("tool_trace")))
    return entry


def trace_fields(trace: Any) -> dict[str, Any]:
    """A result entry's compact tool trace (``tool_trace``: tool, args summary, outcome, seconds
    per call, in order; ``tool_trace_dropped``: earlier calls not kept), from the child's run."""
    if not isinstance(trace, dict) or not isinstance(trace.get("steps"), list):
        return {}
    fields: dict[str, Any] = {"tool_trace": [step for step in trace["steps"] if isinstance(step, dict)]}
    if trace.get("dropped"):
        fields["tool_trace_dropped"] = int(trace["dropped"])
    return fields


def fabricated_entry(task_index: int, status: str, error: str, child: Any, started: float) -> dict[str, Any]:
    return {"task_index": task_index, "status": status, "summary": None, "api_calls": 0, "error": error,
            "duration_seconds": round(time.monotonic() - started, 2), "model": str_attr(child, "model"),
            "exit_reason": "interrupted" if status == "interrupted" else "error", "truncated": False}


def finalize_child_results(entries: list[dict[str, Any]], unit: Batch) -> list[dict[str, Any]]:
    """Public result entries: private keys dropped, summaries capped (head and tail kept)."""
    cap = unit.cfg.max_summary_chars
    results = []
    for entry in sorted(entries, key=lambda e: e.get("task_index", 0)):
        clean = {k: v for k, v in entry.items() if not str(k).startswith("_")}
        summary = clean.get("summary")
        if isinstance(summary, str) and len(summary) > cap:
            cut = len(summary) - cap
            clean["summary"] = f"{summary[: cap // 2]}\n[... {cut} characters cut ...]\n{summary[-cap // 2:]}"
            clean["summary_truncated"] = True
        results.append(clean)
    return results


@dataclass
class Batch:
    """One delegate_task call (or one completion unit of it): its tasks and where results go.

    ``children`` holds one slot per task this batch runs, ``None`` until the worker that runs
    the task has built its child; ``cancelled`` is set when the batch is stopped.
    """

    tasks: list[TaskArgs]
    children: list[Any]
    parent: Any
    cfg: DelegationConfig
    creds: dict[str, Any]
    context: str | None = None
    role: str = "leaf"
    indexes: list[int] = field(default_factory=list)  # task indexes this batch (or unit) runs
    group: str | None = None
    child_max_iterations: int = 50
    result_hops: int = 0  # delivered results in a row that led to this call (offload.context.result_chain)
    cancelled: threading.Event = field(default_factory=threading.Event)
    budget: Any = None  # the call's ``subagents.budget.DelegationBudget``; its children share it
    lineage: Any = None  # the ``subagents.lineage.Lineage`` its children inherit (None: not counted)
    approvals: Any = None  # the call's ``subagents.approvals.ApprovalGate``; each child gets its own copy
    delegation_id: str | None = None  # the unit's id once dispatched (None: inline)
    # A background unit of offload's own loop (``subagents.resume``): where its children's steps
    # go, and when resumed, the finished entries it keeps and each unfinished child's steps.
    step_writer: Callable[..., bool] | None = None
    recorded: dict[int, dict[str, Any]] = field(default_factory=dict)
    resume_steps: dict[int, list[Any]] = field(default_factory=dict)
    resumed: dict[str, Any] | None = None
    # The unit's seams (``subagents.tool.Seams``): the hermes adapter passes ones that look its
    # patchable names up at call time.
    build_child: Callable[..., Any] = build_child_agent
    run_child: Callable[..., dict[str, Any]] = run_single_child
    finalize_results: Callable[[list[dict[str, Any]], Batch], list[dict[str, Any]]] = finalize_child_results

    @property
    def goals(self) -> list[str]:
        return [t.goal for t in self.tasks]


def unit_stamp(unit: Batch) -> dict[str, Any]:
    """What a unit's events carry of how it was dispatched (``subagent_config``): the model stamp
    the rejection notice reads, and ``result_hops`` when a result started it
    (``offload.context.result_chain``; absent means 0)."""
    stamp = subagent_stamp(unit.cfg.model_dump())
    if unit.result_hops:
        stamp["result_hops"] = unit.result_hops
    return stamp
