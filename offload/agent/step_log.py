"""A background child's durable step log, as offload's own agent loop writes and reads it.

Writing (``StepLog``, attached to a child by the subagents layer): the model's reply with tool
calls is written before any of those tools runs; a side-effecting tool call (every tool not
declared ``read_only``, ``delegate_task`` among them) gets a ``tool_start`` mark meaning "its
effect may have begun": right before it is called, or, for a tool declared ``marks_effect``
(``run_command``), where the tool says its effect begins, after any approval was granted;
every tool call's result is written after it, before the next model call. The ledger fences each
write; a write refused because this process no longer owns the unit sets ``lost``, and the agent
stops. A write that fails for another reason (the ledger unreachable) is logged and the child
goes on: the step log then says less, never something false.

Reading (``replay``): the conversation a new owner continues from, rebuilt from the child's
opening messages and its steps: every logged reply and result in order; for the last reply,
the calls with no result are either ``to_run`` (never started: read-only, or side-effecting
with no start mark) or answered with ``HOST_DIED`` (started, outcome unknown: never run again).
A call of an EARLIER reply with no result was answered ``HOST_DIED`` by an earlier resume
(which logs no step for it) and is answered so again, so a child resumed twice never repeats it.
Pure: no I/O, no clock.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

logger = logging.getLogger(__name__)

# write(seq, kind, payload) -> False when the ledger refused it: the unit has another owner now.
StepWriter = Callable[[int, str, dict[str, Any]], bool]
HOST_DIED = ("The host running this tool call died while it ran: it may or may not have taken effect. "
             "Check its effect (read the file, list the state) before you repeat it.")


class StepLog:
    """One child's step writer; ``seq`` continues from ``next_seq`` (a resumed child's)."""

    def __init__(self, write: StepWriter, next_seq: int = 0) -> None:
        self._write, self.seq, self.lost = write, next_seq, False

    def _append(self, kind: str, payload: dict[str, Any]) -> None:
        try:
            kept = self._write(self.seq, kind, payload)
        except Exception:  # the ledger unreachable: the child goes on, its log says less
            logger.warning("could not write a %s step of a background child", kind, exc_info=True)
            kept = True
        self.seq += 1
        if kept is False:
            self.lost = True

    def reply(self, message: dict[str, Any]) -> None:
        self._append("reply", {"message": message})

    def tool_started(self, call: dict[str, Any]) -> None:
        self._append("tool_start", {"call_id": call["id"], "name": call["name"]})

    def tool_finished(self, call: dict[str, Any], content: str) -> None:
        self._append("tool_result", {"call_id": call["id"], "name": call["name"], "content": content})


@dataclass
class Replayed:
    """What a new owner continues from: the conversation, the calls of the last reply still to
    run, and the seq its own writes start at."""

    messages: list[dict[str, Any]]
    to_run: list[dict[str, str]] = field(default_factory=list)
    next_seq: int = 0
    replies: int = 0
    unknown_calls: list[str] = field(default_factory=list)  # names of calls answered with HOST_DIED


def replay(opening: list[dict[str, Any]], steps: Iterable[Any]) -> Replayed:
    """Rebuild a child's conversation from its opening messages and its steps (``Step``s of one
    child, in ``seq`` order)."""
    out = Replayed([dict(m) for m in opening])
    pending: dict[str, dict[str, str]] = {}  # call id -> call of the last reply with no result yet
    started: set[str] = set()
    for step in steps:
        out.next_seq = step.seq + 1
        if step.kind == "reply":
            # A reply after one whose calls still lack a result: an earlier new owner answered them
            # (HOST_DIED, in its memory only) and went on; answer them the same way again, or the
            # transcript would miss them and the model would ask for that work once more.
            out.messages.extend({"role": "tool", "tool_call_id": call_id, "content": HOST_DIED} for call_id in pending)
            message = step.payload.get("message") or {}
            out.messages.append(message)
            out.replies += 1
            pending = {c["id"]: _call(c) for c in message.get("tool_calls") or []}
            started = set()
        elif step.kind == "tool_start":
            started.add(step.payload.get("call_id"))
        elif step.kind == "tool_result" and step.payload.get("call_id") in pending:
            call_id = step.payload["call_id"]
            out.messages.append({"role": "tool", "tool_call_id": call_id, "content": step.payload.get("content", "")})
            pending.pop(call_id)
        elif step.kind == "compression":
            out.messages = [dict(m) for m in step.payload.get("messages") or []]
            pending, started = {}, set()
    for call_id, call in pending.items():
        if call_id in started:
            out.messages.append({"role": "tool", "tool_call_id": call_id, "content": HOST_DIED})
            out.unknown_calls.append(call["name"])
        else:
            out.to_run.append(call)
    return out


def _call(wire: dict[str, Any]) -> dict[str, str]:
    """A logged tool call (the Chat Completions form) as the loop runs it."""
    function = wire.get("function") or {}
    return {"id": wire.get("id", ""), "name": function.get("name", ""), "arguments_json": function.get("arguments") or "{}"}
