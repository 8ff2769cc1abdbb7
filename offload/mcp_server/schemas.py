"""What an MCP client's model reads about the five tools, and the one check of their arguments.

Owns: each tool's title, description (written for a model on the other side of MCP, not a
docstring) and annotations; the parameter descriptions (``delegate_task``'s reuse the in-process
tool's field descriptions, ``offload.subagents.args``, minus what is wrong over MCP: its
"after you end your turn" text and its ``background`` and ``role`` fields); the output schemas
of the structured content the tools return; and
``ToolSurface``, a server middleware that puts the output schemas on ``tools/list`` and
validates every ``tools/call``'s arguments against the tool's input schema before it runs; ``Unoffered``, which keeps the SDK's empty prompts and resources out of the
capabilities.

Invariants: an unknown argument (``contxt``) is refused, never silently dropped, exactly as an
unknown key in a task is; a wrong type or a value out of range is one line naming the argument,
what it got and what it takes, never pydantic's text; every output schema admits every
structured content its tool returns (``additionalProperties`` open, nothing required that a
result or a handle lacks), since clients validate against it.
"""
from __future__ import annotations

from typing import Any, Callable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations
from mcp_types.jsonrpc import METHOD_NOT_FOUND
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from offload.mcp_server.delegations import clip
from offload.subagents.args import DelegateArgs, TaskArgs

GOAL = DelegateArgs.model_fields["goal"].description
CONTEXT = DelegateArgs.model_fields["context"].description
TASKS = DelegateArgs.model_fields["tasks"].description
TASK_GOAL = TaskArgs.model_fields["goal"].description
DELEGATION_ID = "The id delegate_task returned (a unique prefix is enough)."
WAIT_S = ("Seconds to wait for the result, 0 to 3600 (0: answer at once). The call returns early when the "
          "subagents finish; call again while it runs.")
LIMIT = "How many delegations to list, newest first (1 to 1000)."

TOOLS: dict[str, dict[str, Any]] = {
    "delegate_task": {
        "title": "Delegate to background subagents",
        "description": ("Hand work to subagents that run in the background. Returns at once with a delegation_id; "
                        "nothing is pushed to you later: collect the result with delegation_result (it can wait) "
                        "or watch it with delegation_status. Give each task a concrete, self-contained goal and "
                        "the context it needs: a subagent sees nothing of this conversation."),
        "annotations": ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                       open_world_hint=True)},
    "delegation_status": {
        "title": "Delegation status",
        "description": ("The state of one delegation and each subagent's progress (API calls, the tool it runs, "
                        "seconds since its last activity). Does not acknowledge the result."),
        "annotations": ToolAnnotations(read_only_hint=True, open_world_hint=False)},
    "delegation_result": {
        "title": "Delegation result",
        "description": ("The result of one delegation, waiting up to wait_s seconds for it. While it still runs you "
                        "get its state and progress instead: call again to keep waiting. A finished result read "
                        "in full is acknowledged (marked delivered). While you wait, a subagent's command that "
                        "needs your approval is put to you, if your client supports elicitation."),
        "annotations": ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)},
    "list_delegations": {
        "title": "List delegations",
        "description": "Your delegations, newest first: id, state, what it is about, whether you read its result.",
        "annotations": ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)},
    "stop_delegation": {
        "title": "Stop a delegation",
        "description": ("Stop one delegation: a queued one leaves the queue and never runs, a running one is "
                        "interrupted. Its partial result is still recorded: collect it with delegation_result."),
        "annotations": ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                       open_world_hint=False)},
}

_RESULT = {"type": "object", "additionalProperties": True, "properties": {
    "delegation_id": {"type": "string"},
    "state": {"type": "string", "description": "queued, running, completed, partial, failed, interrupted, ..."},
    "children_done": {"type": "integer"}, "children_total": {"type": "integer"},
    "delivered": {"type": "boolean", "description": "whether the result was read in full (acknowledged)"},
    "text": {"type": ["string", "null"], "description": "the result as the agent reads it, once finished"}}}
OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    # A task-capable client gets delegation_result's document as delegate_task's final result.
    "delegate_task": {"type": "object", "additionalProperties": True, "properties": {
        "status": {"type": "string", "description": "dispatched"}, "delegation_id": {"type": "string"},
        "state": {"type": "string"}, "note": {"type": "string"}}},
    "delegation_status": _RESULT, "delegation_result": _RESULT, "stop_delegation": _RESULT,
    "list_delegations": {"type": "object", "required": ["delegations"], "properties": {
        "delegations": {"type": "array", "items": {"type": "object", "additionalProperties": True, "properties": {
            "delegation_id": {"type": "string"}, "state": {"type": "string"}, "label": {"type": "string"},
            "delivered": {"type": "boolean"}}}}}},
}


def problem(tool: str, schema: dict[str, Any], arguments: Any) -> str | None:
    """Why ``arguments`` do not fit ``tool``'s input schema, in one line naming the fix; None when they do."""
    if not isinstance(arguments, dict):
        return f"{tool} takes its arguments as an object, got {type(arguments).__name__}"
    known = sorted((schema.get("properties") or {}).keys())
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        return (f"{tool} has no argument {', '.join(repr(u) for u in unknown)}; its arguments are "
                f"{', '.join(known)} (check the spelling)")
    error = best_match(Draft202012Validator(schema).iter_errors(arguments))  # into anyOf: the branch that fits best
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path) or "the arguments"
    return f"{tool}: {where}: {clip(error.message, 300)}"


class ToolSurface:
    """Server middleware: ``tools/list`` carries each tool's output schema; a ``tools/call`` whose
    arguments do not fit the tool's input schema is answered with a tool error naming the fix,
    before the tool runs. ``schemas()``: each tool's input schema by name (read once)."""

    def __init__(self, schemas: Callable[[], Any]) -> None:
        self.schemas = schemas
        self._known: dict[str, dict[str, Any]] | None = None

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/list":
            listed = await call_next(ctx)
            if not isinstance(listed, dict):
                return listed
            return {**listed, "tools": [{**t, "outputSchema": OUTPUT_SCHEMAS[t["name"]]} if t.get("name") in
                                        OUTPUT_SCHEMAS else t for t in listed.get("tools") or []]}
        if ctx.method != "tools/call" or not isinstance(ctx.params, dict):
            return await call_next(ctx)
        if self._known is None:
            self._known = dict(await self.schemas())
        name = ctx.params.get("name")
        schema = self._known.get(name) if isinstance(name, str) else None
        why = problem(name, schema, ctx.params.get("arguments") or {}) if schema is not None else None
        if why is None:
            return await call_next(ctx)
        refusal: dict[str, Any] = {"content": [{"type": "text", "text": why}], "isError": True}
        return {**refusal, "resultType": "complete"} if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else refusal


UNOFFERED = ("prompts", "resources")  # the SDK serves empty ones; offload offers neither


class Unoffered:
    """Server middleware: the capabilities offload does not offer are not advertised (the SDK
    advertises empty prompts and resources), and their methods answer -32601 "method not
    found" naming what the server does offer, instead of the SDK's error code 0."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method.split("/")[0] in UNOFFERED:
            raise MCPError(code=METHOD_NOT_FOUND, message=f"{ctx.method}: offload mcp offers no prompts or resources, "
                           "only tools (tools/list lists them)")
        result = await call_next(ctx)
        if ctx.method in ("initialize", "server/discover") and isinstance(result, dict):
            capabilities = {k: v for k, v in (result.get("capabilities") or {}).items() if k not in UNOFFERED}
            return {**result, "capabilities": capabilities}
        return result
