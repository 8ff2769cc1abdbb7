"""Building and running the children of one delegate_task unit, on worker threads.

Each child is BUILT on the thread that runs it, never on the caller's: a slow or failing build
cannot block the parent's turn (background) or its interrupt (sync). A unit's ``stop``
(``interrupt_fn`` of a background unit, or the parent's interrupt in sync mode) sets the
unit's ``cancelled`` flag and interrupts every child built so far; a build still in progress
is honoured when it returns — the new child is interrupted and never run. Each child gets the
unit's lineage (``offload.subagents.lineage``) and gives its place in the tree's running count
back when it ends. Invariant: every task of the unit yields exactly one entry: real, ``error``
(the build or the run raised), or ``interrupted``.
"""
from __future__ import annotations

import contextvars
import functools
import queue
import threading
import time
from typing import Any, Callable

from offload.engine.observers import span, span_event
from offload.engine.states import COMPLETED, child_state
from offload.subagents.approvals import GATE_SETTING
from offload.subagents.child import Batch, child_prompt, fabricated_entry
from offload.subagents.resume import resumed_entry, resumed_info, span_attributes
from offload.subagents.lineage import adopt

UNWIND_S = 10.0  # after a parent interrupt, children get this long to return their partial work
_POLL_S = 0.2


def run_children(unit: Batch, on_entry: Callable[[dict], Any] | None,
                 honor_parent_interrupt: bool = False) -> list[dict[str, Any]]:
    """Build and run the unit's children in parallel; hand each entry to ``on_entry`` as it lands.

    ``honor_parent_interrupt`` (sync mode): the children belong to the parent's turn, so they
    are attached to it as they are built and a parent interrupt stops them.
    """
    done: queue.Queue[dict[str, Any]] = queue.Queue()
    positions = list(enumerate(unit.indexes))
    if len(positions) == 1 and not honor_parent_interrupt:  # already on a worker: no extra thread
        _run_one(unit, *positions[0], done, attach=False)
    else:
        for pos, index in positions:
            # Each child thread runs in a copy of the unit's context (session variables, the trace).
            threading.Thread(target=contextvars.copy_context().run,
                             args=(_run_one, unit, pos, index, done, honor_parent_interrupt),
                             name=f"delegate-child-{index}", daemon=True).start()
    try:
        return _collect(unit, done, on_entry, honor_parent_interrupt)
    finally:
        if honor_parent_interrupt:
            detach(unit)


def _run_one(unit: Batch, pos: int, index: int, done: queue.Queue, attach: bool) -> None:
    task = unit.tasks[index]
    with span("offload.subagent", task_index=index, goal=task.goal[:200]) as traced:
        try:
            entry = _build_and_run(unit, pos, index, attach)
        finally:
            if unit.lineage is not None:  # its place in the tree's running count (taken by the call)
                unit.lineage.live.release(1)
        traced.set(status=entry.get("status"), api_calls=entry.get("api_calls"), **span_attributes(entry.get("resumed")))
        if (state := child_state(entry.get("status"))) != COMPLETED:  # failed, error, interrupted, stalled …
            traced.fail(f"{state}: {entry.get('error') or entry.get('failure_reason') or ''}".rstrip(": "))
    done.put(entry)


def _build_and_run(unit: Batch, pos: int, index: int, attach: bool) -> dict[str, Any]:
    task = unit.tasks[index]
    started = time.monotonic()
    child = None
    try:
        if index in unit.recorded:  # finished before its owner died: kept, never run again
            entry = unit.recorded[index]
        elif unit.cancelled.is_set():
            entry = fabricated_entry(index, "interrupted", "stopped before the subagent was built", None, started)
        else:
            child = _build(unit, pos, index, attach)
            if unit.cancelled.is_set():  # a stop that arrived while we were building
                _interrupt(child)
                entry = fabricated_entry(index, "interrupted", "stopped before the subagent started", child, started)
            else:
                if unit.resumed is not None:  # on the subagent span, when it continues
                    span_event("resumed", **span_attributes(resumed_info(getattr(child, "resume_from", None), unit)))
                entry = unit.run_child(index, task.goal, child=child, parent_agent=unit.parent,
                                       context=task.context or unit.context)
                if unit.resumed is not None:
                    entry = resumed_entry(entry, getattr(child, "resume_from", None), unit)
    except BaseException as exc:  # a build or run that raised is an "error" task, not a dead unit
        what = "running" if child is not None else "building"
        entry = fabricated_entry(index, "error", f"{type(exc).__name__}: {exc}", child, started)
        entry["failure_reason"] = f"{what} the subagent raised"
    return entry


def _build(unit: Batch, pos: int, index: int, attach: bool) -> Any:
    task = unit.tasks[index]
    child = unit.build_child(task_index=index, goal=task.goal, context=task.context or unit.context,
                             toolsets=task.toolsets, role=unit.role, creds=unit.creds,
                             max_iterations=unit.child_max_iterations, parent_agent=unit.parent)
    if unit.budget is not None:
        child.token_budget = unit.budget  # shared by the call's children; an agent checks it per model call
    if unit.lineage is not None:  # its own calls inherit the root session, the depth, the tree, the budget
        adopt(child, unit.lineage)
    settings = settings_of(child)
    if unit.approvals is not None and settings is not None:  # its run_command asks this gate
        settings[GATE_SETTING] = unit.approvals.for_child(unit.delegation_id, index)
    if unit.step_writer is not None:
        _log_steps(unit, index, child)
    unit.children[pos] = child
    if attach:
        _with_children_list(unit.parent, lambda kids: kids.append(child))
    return child


def _log_steps(unit: Batch, index: int, child: Any) -> None:
    """A child of offload's own loop writes its steps; a resumed one continues from its replay."""
    from offload.agent.core import AIAgent
    from offload.agent.step_log import StepLog, replay

    if not isinstance(child, AIAgent):
        return
    task = unit.tasks[index]
    replayed = None
    if unit.resume_steps.get(index):
        replayed = replay(child.opening_messages(child_prompt(task.goal, task.context or unit.context)),
                          unit.resume_steps[index])
        child.resume_from = replayed
    child.step_log = StepLog(next_seq=replayed.next_seq if replayed else 0,
                             write_many=functools.partial(unit.step_writer, index))


def settings_of(child: Any) -> dict[str, Any] | None:
    settings = getattr(child, "tool_settings", None)
    return settings if isinstance(settings, dict) else None


def _collect(unit: Batch, done: queue.Queue, on_entry, honor_parent_interrupt: bool) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    deadline = None
    heartbeat = _Heartbeat(unit) if honor_parent_interrupt else None
    while len(entries) < len(unit.indexes):
        if heartbeat is not None:
            heartbeat.beat()
        try:
            entry = done.get(timeout=_POLL_S)
        except queue.Empty:
            if honor_parent_interrupt and deadline is None and getattr(unit.parent, "_interrupt_requested", False) is True:
                stop(unit)
                deadline = time.monotonic() + UNWIND_S
            if deadline is not None and time.monotonic() > deadline:
                break
            continue
        entries.append(entry)
        if on_entry is not None:
            on_entry(entry)
    seen = {e.get("task_index") for e in entries}
    for index, child in zip(unit.indexes, unit.children):
        if index not in seen:
            entries.append(fabricated_entry(index, "interrupted", "the parent was interrupted", child,
                                                time.monotonic()))
    return entries


class _Heartbeat:
    """Inline children belong to the parent's turn: while they make progress, so does the parent
    (its ``touch_activity``), so a parent waiting on them is never judged idle or stalled."""

    def __init__(self, unit: Batch) -> None:
        self.sample, self.touch = progress_token(unit.children), getattr(unit.parent, "touch_activity", None)
        self.last: Any = None

    def beat(self) -> None:
        if not callable(self.touch):
            return  # a parent without an activity clock (a test double, a hermes agent)
        token = self.sample()[0]
        if token != self.last:
            self.last = token
            try:
                self.touch()
            except Exception:  # a sign of life is best effort
                pass


def stop(unit: Batch) -> None:
    """Stop the unit: no child starts from now on, and every built child is interrupted."""
    unit.cancelled.set()
    for child in list(unit.children):
        if child is not None:
            _interrupt(child)


def _interrupt(child: Any) -> None:
    try:
        child.interrupt("Async delegation cancelled")
    except Exception:
        pass  # one broken child must not keep its siblings running


def transcript_reader(unit: Batch) -> Callable[[], list[tuple[int, list[tuple[float, dict[str, Any]]]]]]:
    """The journal's reader of a unit's conversations: per built child, its task index and its
    ``(time, message)`` pairs so far (``AIAgent.transcript``; a child without one says nothing)."""
    def read() -> list[tuple[int, list[tuple[float, dict[str, Any]]]]]:
        said = []
        for index, child in zip(unit.indexes, list(unit.children)):
            transcript = getattr(child, "transcript", None)  # test doubles and foreign children may lack it
            said.append((index, transcript() if callable(transcript) else []))
        return said
    return read


def progress_token(children: list[Any]) -> Callable[[], tuple[tuple, bool]]:
    """The stall monitor's (and the rosters') sampler: one entry per child (None while unbuilt or
    unreadable): API calls, current tool, last activity, the last line it wrote, its last tool call."""
    def sample() -> tuple[tuple, bool]:
        token, in_tool = [], False
        for child in list(children):
            try:
                summary = child.get_activity_summary() if child is not None else None
            except Exception:
                summary = None
            if not isinstance(summary, dict):
                token.append(None)
                continue
            tool = summary.get("current_tool")
            in_tool = in_tool or bool(tool)
            token.append((summary.get("api_call_count"), tool, summary.get("last_activity_ts"),
                          summary.get("last_text"), _step_label(summary.get("last_tool"))))
        return tuple(token), in_tool
    return sample


def _step_label(step: Any) -> str | None:
    """A finished tool call as a roster shows it: ``read_file ok 0.2 s``."""
    if not isinstance(step, dict) or not step.get("tool"):
        return None
    seconds = step.get("seconds")
    took = f" {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
    return f"{step['tool']} {step.get('outcome') or 'ok'}{took}"


def detach(unit: Batch) -> None:
    def drop(kids: list) -> None:
        kids[:] = [c for c in kids if not any(c is b for b in unit.children)]
    _with_children_list(unit.parent, drop)


def _with_children_list(parent: Any, change: Callable[[list], Any]) -> None:
    kids = getattr(parent, "_active_children", None)
    if not isinstance(kids, list):
        return
    lock = getattr(parent, "_active_children_lock", None)
    if lock is None:
        change(kids)
        return
    with lock:
        change(kids)
