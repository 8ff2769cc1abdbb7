"""The agent loop's side of a background child's step log (``offload.agent.step_log``): where
each write happens relative to a tool call, and what a refused or failed write does to the run.

- a read-only call: what is queued (the reply, earlier results) is written before it runs;
- a side-effecting call: its start mark, in one write with what is queued, before it runs --
  or, for a tool declared ``marks_effect`` (``run_command``), the reply first and the mark from
  inside the tool where its effect begins (after any approval: a command still waiting for one
  when its owner died never started, so the resumed child asks again);
- a mark the ledger could not take (unreachable): the call is not run (``UNMARKED``), since a
  resume would take it for never started and run it twice;
- a write the ledger refused (another process owns the unit now): the run is interrupted.

Mixed into ``AIAgent`` (``offload.agent.core``), whose ``step_log`` and ``interrupt`` it uses.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from offload.agent.step_log import UNMARKED, StepLog
from offload.toolsets.toolspec import Tool, ToolContext, ToolError


class StepMarks:
    step_log: StepLog | None
    interrupt: Callable[..., Any]

    def _start_mark(self, call: dict[str, str], tool: Tool | None, ctx: ToolContext) -> ToolContext | None:
        """Write a side-effecting call's start mark now, or (a ``marks_effect`` tool) hand the
        tool a context whose ``effect_begins`` writes it where its effect begins: a command
        that waited for approval when its owner died never started, and is asked again."""
        if self.step_log is None:
            return ctx
        if tool is not None and tool.read_only:
            self._logged(lambda log: log.flush())  # the reply and earlier results durable before it runs
            return ctx
        if tool is None or not tool.marks_effect:  # one write with what is queued; None: not written
            return None if self._logged(lambda log: log.tool_started(call)) is False else ctx
        self._logged(lambda log: log.flush())  # the reply durable before an approval is asked
        return dataclasses.replace(ctx, effect_begins=lambda: self._effect_begins(call))

    def _logged(self, write: Callable[[StepLog], Any]) -> Any:
        """One step-log write (its value); a write the ledger refused (another owner has the unit)
        stops this run."""
        log = self.step_log
        if log is None or log.lost:
            return None
        out = write(log)
        if log.lost:
            self.interrupt("Another offload process took this unit over; this one stopped its child.")
        return out

    def _effect_begins(self, call: dict[str, str]) -> None:
        """A ``marks_effect`` tool's start mark, from inside it: no effect without it."""
        if self._logged(lambda log: log.tool_started(call)) is False:
            raise ToolError(UNMARKED)
