"""The result document: what one delegation is, for machines. One definition, used by
``offload run --json``, ``offload inbox --show ID --json``, the dashboard's JSON API and (with
the same keys) the MCP tools and the Python API.

``from_row`` (a ledger row: any process, running or finished) and ``from_event`` (a completion
event as the bus delivers it) are pure: no clock, no I/O, no config read. ``to_json()`` is the
wire form; ``docs/vocabulary.md`` lists its keys. Invariants: the words of ``state`` are those
of ``offload.engine.states``; keys are never renamed within a ``schema`` version (new keys may
be added); ``text`` is exactly what the agent reads (``offload.render``), null until finished.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from offload.engine.states import QUEUED, RUNNING, UNFINISHED, UNKNOWN, child_state, event_state, stop_reason, unit_state
from offload.ledger import LedgerRow
from offload.render.resumed import child_resumed, unit_resumed
from offload.render.truncation import is_truncated
from offload.render.notification import format_event

SCHEMA = "offload.result/1"
RUN_SCHEMA = "offload.run/1"
Render = Callable[[dict[str, Any]], "str | None"]  # the text the agent reads, from an event


@dataclass(frozen=True)
class Tokens:
    """What the server reported; None (null) is unknown, never 0, and ``unknown`` says why:
    ``not_reported`` (the server answered without usage), ``rejected`` (it refused every call
    with an HTTP error), ``no_reply`` (no call was answered)."""

    input: int | None = None
    output: int | None = None
    unknown: str | None = None


@dataclass(frozen=True)
class ToolStep:
    """One tool call of a child, in order: the tool, a summary of its arguments, ``ok`` or
    ``error``, and how long it took."""

    tool: str
    args: str
    outcome: str
    seconds: float | None = None
    approval: dict[str, Any] | None = None  # a command that needed approval: decision, by whom (else absent)


@dataclass(frozen=True)
class ChildResult:
    """One child (subagent) of the unit. ``task`` counts from 1, as every view shows it."""

    task: int
    goal: str
    state: str
    summary: str | None = None
    error: str | None = None
    duration_s: float | None = None
    api_calls: int | None = None
    tokens: Tokens | None = None
    cost_usd: float | None = None
    truncated: bool = False  # the answer was cut off (iteration cap, or the model's length limit)
    exit_reason: str | None = None
    tool_trace: tuple[ToolStep, ...] | None = None  # its tool calls (null: none recorded, e.g. an older result)
    tool_trace_dropped: int = 0  # earlier tool calls not kept in the trace
    resumed: dict[str, Any] | None = None  # it continued after its owner died (``render.resumed``); else null


@dataclass(frozen=True)
class DelegationResult:
    """One unit: who asked (``session``), what (``label``, ``children``' goals), how it ended."""

    id: str
    session: str | None
    label: str
    state: str
    children: tuple[ChildResult, ...]
    group: str | None = None
    text: str | None = None
    error: str | None = None
    dispatched_at: float | None = None
    completed_at: float | None = None
    delivery_state: str | None = None  # pending | delivered | dropped; null when read from an event alone
    delivery_attempts: int | None = None
    delivered_at: float | None = None
    stop_reason: str | None = None  # why it stopped early: "stall" (no progress), "user" (stopped); else null
    stall_quiet_s: float | None = None  # with "stall": how long it had made no progress
    resumed: dict[str, Any] | None = None  # a new owner took it over after its owner died: how often, after whom
    schema: str = field(default=SCHEMA)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict (``schema`` first)."""
        data = asdict(self)
        data["children"] = [{**child, "tool_trace": None if child["tool_trace"] is None else [
            {k: v for k, v in step.items() if k != "approval" or v is not None} for step in child["tool_trace"]]}
                            for child in data["children"]]
        return {"schema": data.pop("schema"), **data}


def from_event(evt: Mapping[str, Any], render: Render = format_event) -> DelegationResult:
    """The document of a completion event (delivery fields null: an event does not know them).
    ``render`` makes ``text``; the default is the pure renderer, a caller that must match what
    the agent read for an event older versions stored passes ``format_process_notification``."""
    evt = dict(evt)
    state = event_state(evt)
    children = _children(evt, evt, None, live=_waiting(state))
    return DelegationResult(
        id=str(evt.get("delegation_id") or ""), session=evt.get("parent_session_id") or evt.get("session_key") or None,
        label=_label(evt, evt), group=_text(evt.get("group")), state=state, resumed=_unit_resumed({}, children),
        children=children, text=render(evt), error=_text(evt.get("error")),
        dispatched_at=_number(evt.get("dispatched_at")), completed_at=_number(evt.get("completed_at")),
        stop_reason=stop_reason(evt), stall_quiet_s=_number(evt.get("stalled_after_quiet_seconds")))


def from_row(row: LedgerRow, render: Render = format_event) -> DelegationResult:
    """The document of a ledger row, finished or not: a running one lists the children it has
    recorded so far, the others ``running``."""
    task, event = dict(row.task or {}), dict(row.event or {})
    finished = row.state not in UNFINISHED and bool(event)
    state = event_state({**event, "status": row.state}) if finished else unit_state(row.state)
    partial = (row.result or {}).get("results") if isinstance(row.result, dict) else None
    children = _children(task, event, partial, live=_waiting(state))
    return DelegationResult(
        id=row.delegation_id, session=row.parent_session_id or row.origin_session or None,
        label=_label(task, event), group=_text(task.get("group") or event.get("group")), state=state,
        children=children, resumed=_unit_resumed(task, children),
        text=render(event) if finished else None, error=_text(event.get("error")),
        dispatched_at=row.dispatched_at, completed_at=row.completed_at, delivery_state=row.delivery_state,
        delivery_attempts=row.delivery_attempts, delivered_at=row.delivered_at,
        stop_reason=stop_reason(event) if finished else None,
        stall_quiet_s=_number(event.get("stalled_after_quiet_seconds")) if finished else None)


def _waiting(state: str) -> str | None:
    """The state of a child that has not reported in a unit that is ``state`` (None: finished)."""
    return (QUEUED if state == QUEUED else RUNNING) if state in UNFINISHED else None


def _children(task: Mapping[str, Any], event: Mapping[str, Any], partial: Any, *,
              live: str | None) -> tuple[ChildResult, ...]:
    """One per task of the unit: from the event's ``results`` (or, while it runs, the children
    recorded so far); a single-task event carries its one outcome at the top level. ``live``:
    the state of a child not reported yet (``_waiting``)."""
    results = event.get("results") if isinstance(event.get("results"), list) else partial
    if not (task.get("is_batch") or event.get("is_batch") or results):
        entry = event if event.get("status") and not live else {}
        return (_child(0, task.get("goal") or event.get("goal"), entry, live),)
    goals = list(task.get("goals") or event.get("goals") or [])
    indexes = [i for i in task.get("task_indexes") or event.get("task_indexes") or range(len(goals) or 1)
               if isinstance(i, int)]
    by_index: dict[int, Mapping[str, Any]] = {}
    for position, entry in enumerate(r for r in results or [] if isinstance(r, dict)):
        index = entry.get("task_index")
        by_index[index if isinstance(index, int) else position] = entry
    return tuple(_child(i, goals[i] if 0 <= i < len(goals) else "", by_index.get(i) or {}, live) for i in indexes)


def _child(index: int, goal: Any, entry: Mapping[str, Any], live: str | None) -> ChildResult:
    if not entry:
        return ChildResult(task=index + 1, goal=str(goal or ""), state=live or UNKNOWN)
    tokens = entry.get("tokens") if isinstance(entry.get("tokens"), Mapping) else None
    return ChildResult(
        task=index + 1, goal=str(goal or ""), state=child_state(entry.get("status")),
        summary=_text(entry.get("summary")), error=_text(entry.get("error")),
        duration_s=_number(entry.get("duration_seconds")), api_calls=_count(entry.get("api_calls")),
        tokens=_tokens(tokens) if tokens else None,
        cost_usd=_number(entry.get("cost_usd")), truncated=is_truncated(dict(entry)),
        exit_reason=_text(entry.get("exit_reason")), tool_trace=_trace(entry.get("tool_trace")),
        tool_trace_dropped=_count(entry.get("tool_trace_dropped")) or 0, resumed=child_resumed(entry.get("resumed")))


def _unit_resumed(task: Mapping[str, Any], children: tuple[ChildResult, ...]) -> dict[str, Any] | None:
    return unit_resumed(task, [child.resumed for child in children])


def _tokens(tokens: Mapping[str, Any]) -> Tokens:
    counts = _count(tokens.get("input")), _count(tokens.get("output"))
    unknown = (_text(tokens.get("unknown")) or "not_reported") if counts == (None, None) else None
    return Tokens(*counts, unknown=unknown)


def _trace(steps: Any) -> tuple[ToolStep, ...] | None:
    if not isinstance(steps, list):
        return None
    return tuple(ToolStep(tool=str(s.get("tool") or ""), args=str(s.get("args") or ""),
                          outcome=str(s.get("outcome") or "ok"), seconds=_number(s.get("seconds")),
                          approval=dict(s["approval"]) if isinstance(s.get("approval"), Mapping) else None)
                 for s in steps if isinstance(s, Mapping))


def _label(task: Mapping[str, Any], event: Mapping[str, Any]) -> str:
    """What the views call the unit: its group, else its goal (a fan-out's names its goals)."""
    if task.get("group") or event.get("group"):
        return f"group {task.get('group') or event.get('group')}"
    goals = task.get("goals") or event.get("goals") or []
    return str(task.get("goal") or event.get("goal") or "; ".join(str(g) for g in goals))


def run_document(session: str | None, answers: Sequence[Mapping[str, Any]], delegations: Sequence[DelegationResult],
                 exit_code: int, error: str | None = None) -> dict[str, Any]:
    """``offload run --json``: the session, the agent's answers in order (each with the
    delegation it answers, or null for the prompt), each delegation's result document, the
    exit code the process ends with, and ``error``: why a run that could not start (a usage or
    configuration error, exit 2) did not (null otherwise)."""
    return {"schema": RUN_SCHEMA, "session": session, "answers": [dict(a) for a in answers],
            "delegations": [d.to_json() for d in delegations], "exit_code": int(exit_code), "error": error}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
