"""Case 7's agent loop: offload's own ``AIAgent`` running one child of ``steps`` steps against an
in-process scripted model (no HTTP, so the loop itself is cheap and what durability adds shows),
each step one model call asking for one call of a side-effecting tool, then an answer.

The same loop runs three ways: bare (``run_child(...)`` with no log), with offload's step log
(``StepLog`` over ``engine.record_step``: the fenced ledger write a background child of offload's
loop makes), and inside a DBOS workflow (``bench.cases.dbos_rig``: the model call and the tool call each
a DBOS step). Nothing here measures; ``case_steps`` does.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from offload.agent.core import AIAgent
from offload.agent.llm_stream import AssistantTurn
from offload.agent.step_log import StepLog
from offload.agent.toolsets import register_toolset
from offload.toolsets.toolspec import Tool

TOOLSET = "bench_steps"
TOOL = "bench_poke"
OUTPUT_BYTES = 1024  # each tool result: a page of a file, a command's output
USAGE = {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}
_OUTPUT = ("x" * 63 + "\n") * (OUTPUT_BYTES // 64)


class ScriptedTurns:
    """A ``TurnStreamer`` that asks for one ``bench_poke`` call per turn, ``steps`` times, then answers."""

    def __init__(self, steps: int) -> None:
        self.steps, self.calls = steps, 0

    def stream_turn(self, messages, tools, *, on_activity=None, should_stop=None, on_text=None) -> AssistantTurn:
        self.calls += 1
        if on_activity is not None:
            on_activity()
        if self.calls > self.steps:
            return AssistantTurn(f"done after {self.steps} steps", [], "stop", dict(USAGE))
        call = {"id": f"call_{self.calls}", "name": TOOL, "arguments_json": json.dumps({"n": self.calls})}
        return AssistantTurn("", [call], "tool_calls", dict(USAGE))


def poke(args: dict[str, Any], ctx: Any) -> str:
    """The side-effecting tool (not ``read_only``: the step log marks its start)."""
    return f"poked {args.get('n')}\n{_OUTPUT}"


def register(handler: Callable[[dict[str, Any], Any], str] = poke) -> None:
    """(Re)register the bench toolset with ``handler`` as its one tool."""
    register_toolset(TOOLSET, lambda: [Tool(TOOL, TOOLSET, "Poke the bench's counter.",
                                            {"type": "object", "properties": {"n": {"type": "integer"}}}, handler)])


def child(steps: int, workspace: Path, llm: Any = None) -> AIAgent:
    """A child agent as a background child is built (depth 1), on the scripted model."""
    return AIAgent(model="bench-model", base_url=None, api_key=None, toolsets=[TOOLSET], max_iterations=steps + 2,
                   system_prompt="You are a bench child.", workspace=workspace, delegate_depth=1,
                   llm=llm if llm is not None else ScriptedTurns(steps))


def run_child(steps: int, workspace: Path, step_log: StepLog | None = None, llm: Any = None) -> dict[str, Any]:
    """Run one child to its answer; the result entry a runner returns. Raises if it did not finish
    (a figure of a loop that stopped early would be worthless)."""
    agent = child(steps, workspace, llm)
    agent.step_log = step_log
    out = agent.run_conversation("Poke the counter until told to stop.")
    if out.get("exit_reason") != "completed" or out.get("api_calls") != steps + 1:
        raise RuntimeError(f"the bench child stopped early: {out.get('exit_reason')} after {out.get('api_calls')} "
                           f"model calls (expected {steps + 1}): {out.get('error')}")
    if step_log is not None and step_log.lost:
        raise RuntimeError("the bench child's step log was refused: the unit was not running under this process")
    return {"status": "completed", "summary": out["final_response"]}
