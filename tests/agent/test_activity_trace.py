"""A child's progress as the rosters sample it and its tool trace as its result carries it
(issue 29 item 4): the tracker records each tool call (tool, argument summary, outcome,
seconds) in order, keeps the last ``MAX_TRACE``, and offers the last line the model wrote."""
from __future__ import annotations

from pathlib import Path

from offload.agent import activity as act
from offload.agent.activity import ActivityTracker, last_line, summarize_args
from offload.agent.tool_calls import execute_tool_call
from offload.toolsets.toolspec import Tool, ToolContext, ToolError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tool(name: str, handler) -> Tool:
    return Tool(name, "test", f"{name} for the test", {"type": "object"}, handler)


def test_each_tool_call_is_a_step_with_its_outcome_and_seconds_in_order():
    clock = Clock()
    tracker = ActivityTracker(clock)

    def slow_ok(args, ctx):
        clock.now += 1.25
        return "fine"

    def refusing(args, ctx):
        clock.now += 0.5
        raise ToolError("no such file")
    tools = {"read_file": tool("read_file", slow_ok), "write_file": tool("write_file", refusing)}
    ctx = ToolContext(workspace=Path("."))
    assert execute_tool_call({"name": "read_file", "arguments_json": '{"path": "a.py"}'}, tools, ctx, tracker) == "fine"
    assert execute_tool_call({"name": "write_file", "arguments_json": '{"path": "b.py", "content": "x"}'},
                             tools, ctx, tracker) == "Error: no such file"
    assert tracker.trace() == {"steps": [
        {"tool": "read_file", "args": 'path="a.py"', "outcome": "ok", "seconds": 1.25},
        {"tool": "write_file", "args": 'path="b.py" content="x"', "outcome": "error", "seconds": 0.5}], "dropped": 0}
    summary = tracker.summary()
    assert summary["current_tool"] is None and summary["last_tool"]["tool"] == "write_file"
    tracker.begin_run()
    assert tracker.trace() == {"steps": [], "dropped": 0} and tracker.summary()["last_tool"] is None


def test_a_long_run_keeps_its_last_steps_and_counts_the_rest(monkeypatch):
    monkeypatch.setattr(act, "MAX_TRACE", 3)
    tracker = ActivityTracker()
    for i in range(5):
        tracker.tool_started(f"t{i}")
        tracker.tool_finished()
    trace = tracker.trace()
    assert [s["tool"] for s in trace["steps"]] == ["t2", "t3", "t4"] and trace["dropped"] == 2


def test_the_last_line_written_is_what_a_roster_shows():
    tracker = ActivityTracker()
    tracker.text("First I read the files.\n\nNow comparing   the two\n")
    assert tracker.summary()["last_text"] == "Now comparing the two"
    assert last_line("x" * 150, limit=20) == "…" + "x" * 19 and last_line(" \n ") is None


def test_argument_summaries_are_one_short_line():
    assert summarize_args({"command": "ls -la\nrm -rf /tmp/x", "timeout_s": 5}) == 'command="ls -la\\nrm -rf /tmp/x" timeout_s=5'
    long = summarize_args({"content": "y" * 500})
    assert len(long) == act.ARGS_CHARS and long.endswith("…")
