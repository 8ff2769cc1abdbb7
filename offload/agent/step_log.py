"""A background child's durable step log, as offload's own agent loop writes and reads it.

Writing (``StepLog``, attached to a child by the subagents layer): the model's reply with tool
calls is written before any of those tools runs; a side-effecting tool call (every tool not
declared ``read_only``, ``delegate_task`` among them) gets a ``tool_start`` mark meaning "its
effect may have begun": right before it is called, or, for a tool declared ``marks_effect``
(``run_command``), where the tool says its effect begins, after any approval was granted;
every tool call's result is written after it, before the next model call (or the next call's
start mark, in the same write). The ledger fences each
write; a write refused because this process no longer owns the unit sets ``lost``, and the agent
stops. A write that fails for another reason (the ledger unreachable) is logged and the child
goes on: the step log then says less, never something false -- but a call whose start mark was
not written is not run (``UNMARKED``): a resume would take it for never started and run it twice.

Reading (``replay``): the conversation a new owner continues from, rebuilt from the child's
opening messages and its steps: every logged reply and result in order; for the last reply,
the calls with no result are either ``to_run`` (never started: read-only, or side-effecting
with no start mark) or answered with ``HOST_DIED`` (started, outcome unknown: never run again);
with neither, a model call was in flight at the death (``model_call_in_flight``) and is issued again.
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
# write_many([(seq, kind, payload), ...]) -> the same, for several steps in one ledger write.
StepsWriter = Callable[[list[tuple[int, str, dict[str, Any]]]], bool]
UNMARKED = ("Not run: the ledger could not record that this call was starting (it is unreachable), so after "
            "a crash no one could tell whether it ran. Nothing was run; try it again.")
HOST_DIED = ("The host running this tool call died while it ran: it may or may not have taken effect. "
             "Check its effect (read the file, list the state) before you repeat it.")


class StepLog:
    """One child's step writer; ``seq`` continues from ``next_seq`` (a resumed child's).

    Steps reach the ledger at the loop's durability points: ``tool_started`` (a side effect is
    about to run) and ``flush`` (a read-only tool is about to run, or the next model call is);
    ``reply`` and ``tool_finished`` queue theirs until the next of those. So a reply and the start
    mark of its first side-effecting call, or a result and the next call's mark, are one ledger
    write (``write_many``: one transaction, one sync; each step alone through ``write`` without it)."""

    def __init__(self, write: StepWriter | None = None, next_seq: int = 0,
                 write_many: StepsWriter | None = None) -> None:
        if write is None and write_many is None:
            raise ValueError("a step log needs write or write_many")
        self._write, self._write_many, self.seq, self.lost = write, write_many, next_seq, False
        self._queued: list[tuple[int, str, dict[str, Any]]] = []

    def _queue(self, kind: str, payload: dict[str, Any]) -> None:
        self._queued.append((self.seq, kind, payload))
        self.seq += 1

    def flush(self) -> bool:
        """Write what is queued; a refusal sets ``lost``. False when a start mark could not be
        written (the ledger unreachable): that call must not run, since a resume could not tell
        whether it had."""
        queued, self._queued = self._queued, []
        if not queued:
            return True
        try:
            if self._write_many is not None:
                kept = self._write_many(queued)
            else:
                kept = all(self._write(*step) is not False for step in queued)  # type: ignore[misc]
        except Exception:  # the ledger unreachable: the child goes on, its log says less
            logger.warning("could not write %s step(s) of a background child", len(queued), exc_info=True)
            return not any(kind == "tool_start" for _, kind, _ in queued)
        if kept is False:
            self.lost = True
        return True

    def reply(self, message: dict[str, Any]) -> None:
        self._queue("reply", {"message": message})

    def tool_started(self, call: dict[str, Any]) -> bool:
        """Queue the call's start mark and write it with what is queued; False: not written."""
        self._queue("tool_start", {"call_id": call["id"], "name": call["name"]})
        return self.flush()

    def tool_finished(self, call: dict[str, Any], content: str) -> None:
        self._queue("tool_result", {"call_id": call["id"], "name": call["name"], "content": content})


@dataclass
class Replayed:
    """What a new owner continues from: the conversation, the calls of the last reply still to
    run, and the seq its own writes start at."""

    messages: list[dict[str, Any]]
    to_run: list[dict[str, str]] = field(default_factory=list)
    next_seq: int = 0
    replies: int = 0
    unknown_calls: list[str] = field(default_factory=list)  # names of calls answered with HOST_DIED

    @property
    def model_call_in_flight(self) -> bool:
        """Whether the log ends where the next thing the child does is a model call (its last
        reply's calls all have results, or it has no reply yet): the dead owner was waiting on
        the model, so the resumed child's first model call issues that one again. A final answer
        is never logged (it ends the child), so one that arrived before the death is issued again
        too."""
        return not self.to_run and not self.unknown_calls


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
