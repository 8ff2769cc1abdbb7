"""MCP Tasks for ``delegate_task``: the tasks extension (``io.modelcontextprotocol/tasks``,
SEP-2663, protocol 2026-07-28) here, and the 2025-11-25 core tasks in ``tasks_legacy``; both
read the same ledger rows, so ``tasks/get`` and ``tasks/cancel`` (one method name each for both
protocols) answer in the shape of the request's protocol.

Invariants:
- the ledger is the task store: a task is its delegation's row, so it outlives the server
  process, and ``tasks/get`` after a restart answers with the recovered result;
- the shape of a ``delegate_task`` answer (a task of this extension, a 2025-11-25 task, or the
  plain tool result) is decided from the request *before* the tool dispatches, and a dispatched
  handle becomes a task without another read that could fail: no error ever leaves a
  delegation its client cannot track. Only a 2026-07-28 request that declared the extension
  gets this extension's task; a 2025-11-25 client that declares it anyway gets the plain result
  unless it asked for a core task (``params.task``);
- statuses: a live delegation is ``working`` (its message says it is queued, or how many
  subagents are done), or ``input_required`` while a subagent's command waits for approval
  (``delegation.approvals: ask``) and the client polling declared elicitation: its
  ``inputRequests`` hold one ``elicitation/create`` per waiting request, keyed by the approval
  request id (unique for ever, as the extension asks), and ``tasks/update`` with
  ``inputResponses`` under those keys decides them (an answered, unknown or foreign key is
  ignored); a stopped one (``tasks/cancel``, ``stop_delegation``, ``offload stop``) is
  ``cancelled``; any other finished one is ``completed`` with the ``delegation_result`` tool
  result inline (``resultType: "complete"``; ``isError`` when it did not complete), and reading
  it acknowledges it; ``failed`` is left to JSON-RPC errors, as the SEP says;
- ``tasks/get`` answers only a client that declared the extension on that request (-32021
  otherwise), before anything is read, so an undeclared poll never acknowledges a result;
- tasks are seen only in their namespace: another namespace's id is "no such task";
- ``tasks/update`` and ``tasks/cancel`` acknowledge with an empty result whatever the id
  (the SEP's rule); update decides the approvals it answers before it acknowledges, so the
  next ``tasks/get`` shows the task ``working`` again; cancel stops the delegation (a queued
  one leaves the queue at once) and the task then reports ``cancelled``.
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, CallToolResult, RequestParams
from mcp_types.jsonrpc import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from offload.engine.states import COMPLETED, INTERRUPTED, QUEUED, UNFINISHED
from offload.ledger import LedgerRow
from offload.mcp_server import approvals
from offload.mcp_server.delegations import (
    QUEUED_NOTE, McpDelegations, McpInputError, Scope, finished_message, status_message,
)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 1000  # subagents take seconds to minutes; a ledger read per second per client is cheap
TASK_TOOL = "delegate_task"
UNDECLARED = (f"tasks/get needs the tasks extension: declare {TASKS_EXTENSION!r} in the request's client "
              "capabilities (extensions), or read the delegation with delegation_status / delegation_result")


class TaskParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel``: the task id and the opaque state we never set."""

    task_id: str
    request_state: str | None = None


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] | None = None


def iso(epoch_s: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch_s or 0.0, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")


def modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared the tasks extension for this request, on a protocol that has
    it (a 2025-11-25 session cannot carry this extension's results)."""
    capabilities = ctx.session.client_capabilities
    return modern(ctx) and bool(capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions)


def finished(row: LedgerRow) -> bool:
    return row.state not in UNFINISHED and bool(row.event)


def task_status(row: LedgerRow, cancelling: bool = False) -> str:
    """``working``, ``cancelled`` (stopped, or a stop was asked here) or ``completed``."""
    if finished(row):
        return "cancelled" if row.state == INTERRUPTED else "completed"
    return "cancelled" if cancelling else "working"


class TasksExtension(Extension):
    """See the module docstring. ``service``: the delegations; ``scope_of``: the namespace a
    request belongs to; ``tool_result``: a finished row's ``delegation_result`` (it acknowledges);
    ``legacy``: the 2025-11-25 tasks, which answer ``tasks/get`` and ``tasks/cancel`` on that
    protocol."""

    identifier = TASKS_EXTENSION

    def __init__(self, service: McpDelegations, scope_of: Callable[[Any], Scope],
                 tool_result: Callable[[LedgerRow], dict[str, Any]], legacy: Any = None) -> None:
        self.service, self.scope_of, self.tool_result, self.legacy = service, scope_of, tool_result, legacy

    def methods(self) -> list[MethodBinding]:
        return [MethodBinding("tasks/get", TaskParams, self._get),
                MethodBinding("tasks/update", UpdateTaskParams, self._update),
                MethodBinding("tasks/cancel", TaskParams, self._cancel),
                *(self.legacy.methods() if self.legacy is not None else [])]

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        """The tool itself dispatches (its checks, the client's roots); a dispatched handle
        becomes the task when the client declared the extension (decided before dispatching)."""
        as_task = params.name == TASK_TOOL and declared(ctx)
        result = await call_next(ctx)
        if not as_task or not isinstance(result, CallToolResult) or result.is_error:
            return result  # an input request, a tool error or a client without tasks: unchanged
        handle = result.structured_content or {}
        if handle.get("status") != "dispatched" or not handle.get("delegation_id") or handle.get("units"):
            return result  # several units report separately: no one task stands for them
        return {**created_task(handle), "resultType": "task"}

    # -- the methods ------------------------------------------------------------------------------
    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        if not modern(ctx) and self.legacy is not None:
            return await self.legacy.get(ctx, params)
        if not declared(ctx):
            raise MCPError(code=MISSING_REQUIRED_CLIENT_CAPABILITY, message=UNDECLARED,
                           data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})
        scope, asks = self.scope_of(ctx), approvals.elicits(ctx)

        def read() -> dict[str, Any]:
            try:
                row = task_row(self.service, scope, params.task_id)
            except McpInputError as exc:
                raise MCPError(code=INVALID_PARAMS, message=f"no such task {params.task_id!r}: {exc}") from None
            return self._task(row, asks=asks)
        return await anyio.to_thread.run_sync(read)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        scope, by = self.scope_of(ctx), approvals.decider(ctx)

        def update() -> None:
            try:
                row = task_row(self.service, scope, params.task_id)
            except McpInputError:
                return  # acknowledged whatever the id (SEP-2663)
            ledger = self.service.off.ledger()
            outstanding = {r["request_id"]: r for r in approvals.pending_of(ledger, row.delegation_id)}
            for key, response in (params.input_responses or {}).items():
                if key in outstanding:  # the extension: ignore a key not outstanding for this task
                    approvals.settle(ledger, outstanding[key], approvals.allows_response(response), by)
        await anyio.to_thread.run_sync(update)
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        if not modern(ctx) and self.legacy is not None:
            return await self.legacy.cancel(ctx, params)
        scope = self.scope_of(ctx)

        def cancel() -> None:
            try:
                self.service.stop(scope, task_row(self.service, scope, params.task_id).delegation_id)
            except McpInputError:
                pass  # acknowledged whatever the id (SEP-2663)
        await anyio.to_thread.run_sync(cancel)
        return {}

    # -- the task shape ---------------------------------------------------------------------------
    def _task(self, row: LedgerRow, asks: bool = False) -> dict[str, Any]:
        """The task of ``row``; ``asks``: the client can be asked (input_required)."""
        status = task_status(row, self.service.cancelling(row.delegation_id))
        task: dict[str, Any] = {
            "taskId": row.delegation_id, "createdAt": iso(row.dispatched_at),
            "lastUpdatedAt": iso(row.updated_at or row.completed_at or row.dispatched_at), "ttlMs": None,
            "pollIntervalMs": POLL_INTERVAL_MS}
        waiting = approvals.pending_of(self.service.off.ledger(), row.delegation_id) if asks and status == "working" else []
        if waiting:
            return {**task, "status": "input_required",
                    "statusMessage": f"{len(waiting)} subagent command(s) waiting for your approval",
                    "inputRequests": {r["request_id"]: approvals.input_request(r) for r in waiting}}
        if status == "working":
            return {**task, "status": "working", "statusMessage": status_message(self.service.status(row))}
        if status == "cancelled":
            return {**task, "status": "cancelled", "statusMessage": "stopped: collect the partial result with "
                    "delegation_result"}
        return {**task, "status": "completed", "statusMessage": finished_message(row),
                "result": {"resultType": "complete", **wire_tool_result(self.tool_result(row))}}


def created_task(handle: dict[str, Any]) -> dict[str, Any]:
    """A just-dispatched handle as a working task, with no ledger read (nothing can fail here)."""
    now = iso(dt.datetime.now(dt.timezone.utc).timestamp())
    return {"taskId": handle["delegation_id"], "status": "working", "statusMessage": QUEUED_NOTE if handle.get("state") == QUEUED else "started",
            "createdAt": now, "lastUpdatedAt": now, "ttlMs": None, "pollIntervalMs": POLL_INTERVAL_MS}


def wire_tool_result(out: dict[str, Any]) -> dict[str, Any]:
    """``delegation_result``'s document as a ``CallToolResult`` in wire form."""
    return {"content": [{"type": "text", "text": out["text"] or ""}], "structuredContent": out,
            "isError": out["state"] != COMPLETED}


def task_row(service: McpDelegations, scope: Scope, task_id: str) -> LedgerRow:
    """The task's row; McpInputError when the scope has no task of exactly that id."""
    row = service.find(scope, task_id)
    if row.delegation_id != task_id:  # a prefix is a convenience of the tools, not of task ids
        raise McpInputError(f"{task_id!r} is not a full task id")
    return row
