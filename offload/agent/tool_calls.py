"""Running one tool call the model asked for and turning the outcome into the tool message text.

Owns ``execute_tool_call``. Invariant: it never raises (except BaseExceptions such as
KeyboardInterrupt): an unknown tool, arguments that are not a JSON object, a ``ToolError`` or
a bug in a tool all become an "Error: ..." text the model can read and act on, so a broken
tool never kills the agent.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable, Mapping

from offload.agent.activity import ActivityTracker, summarize_args
from offload.toolsets.toolspec import Tool, ToolContext, ToolError

logger = logging.getLogger(__name__)

INTERRUPTED_BEFORE_START = "Error: not run — the agent was interrupted before this tool call started."


def execute_tool_call(
    call: Mapping[str, str],
    tools_by_name: Mapping[str, Tool],
    ctx: ToolContext,
    activity: ActivityTracker,
    on_error: Callable[[str], None] = lambda text: None,
) -> str:
    """Run ``call`` ({"id", "name", "arguments_json"}) and return the text the model sees;
    ``on_error(text)`` is told when that text reports a failure (its trace span's status)."""
    name = call.get("name", "")
    tool = tools_by_name.get(name)
    if tool is None:
        available = ", ".join(sorted(tools_by_name)) or "(none)"
        return _failed(on_error, f"Error: unknown tool {name!r}. Call one of the available tools instead: {available}.")
    args_or_error = parse_arguments(name, call.get("arguments_json", ""))
    if isinstance(args_or_error, str):
        return _failed(on_error, args_or_error)
    activity.tool_started(name, summarize_args(args_or_error))
    outcome = "error"
    try:
        output = render_result(tool.handler(args_or_error, ctx))
        outcome = "ok"
        return output
    except ToolError as exc:
        return _failed(on_error, f"Error: {exc}")
    except Exception as exc:  # a tool bug is reported to the model, not raised into the loop
        logger.exception("tool %s raised", name)
        return _failed(on_error, f"Error: {type(exc).__name__}: {exc}")
    finally:
        activity.tool_finished(outcome)  # its step in the run's tool trace


def _failed(on_error: Callable[[str], None], text: str) -> str:
    on_error(text)
    return text


def parse_arguments(name: str, arguments_json: str) -> dict[str, Any] | str:
    """The arguments object, or an error text telling the model how to fix its call."""
    if not arguments_json.strip():
        return {}  # some models send "" for a tool without parameters
    try:
        args = json.loads(arguments_json)
    except json.JSONDecodeError as exc:
        return (
            f"Error: the arguments for {name!r} are not valid JSON ({exc.msg} at position {exc.pos}). "
            "Call the tool again with a single JSON object matching its parameters."
        )
    if not isinstance(args, dict):
        return (
            f"Error: the arguments for {name!r} must be a JSON object, not {type(args).__name__}. "
            "Call the tool again with an object matching its parameters."
        )
    return args


def render_result(result: Any) -> str:
    if isinstance(result, str):
        return result
    if result is None:
        return "(no output)"
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)
