"""MCP Tasks (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663) for clients that opt
in, on the SDK's server extension API: a ``delegate_task`` call from such a client returns a
``CreateTaskResult`` (``resultType: "task"``) whose task id is the delegation id, and
``tasks/get``, ``tasks/update`` and ``tasks/cancel`` read and stop it.

Invariants:
- the ledger is the task store: a task is its delegation's row, so it outlives the server
  process, and ``tasks/get`` after a restart answers with the recovered result;
- the tool dispatches as for any client (its checks, the client's roots); its handle becomes a
  ``CreateTaskResult`` only for a client that declared the extension on that request, and only
  once the row is written, so a ``tasks/get`` for it resolves at once;
- statuses: a live delegation is ``working`` (its message says it is queued, or how many
  subagents are done), or ``input_required`` while a subagent's command waits for approval
  (``delegation.approvals: ask``) and the client polling declared elicitation: its
  ``inputRequests`` hold one ``elicitation/create`` per waiting request, keyed by the approval
  request id (unique for ever, as the extension asks), and ``tasks/update`` with
  ``inputResponses`` under those keys decides them (an answered, unknown or foreign key is
  ignored); a finished one is ``completed`` with the ``delegation_result`` tool result inline (a failed
  or stopped delegation is a tool result too, with ``isError`` when it did not complete), and
  reading it acknowledges it; ``failed`` is left to JSON-RPC errors, as the SEP says;
- tasks are seen only in their namespace: another namespace's id is "no such task";
- ``tasks/update`` and ``tasks/cancel`` acknowledge with an empty result whatever the id
  (the SEP's rule); update decides the approvals it answers before it acknowledges, so the
  next ``tasks/get`` shows the task ``working`` again; cancel asks the delegation's owner to
  stop it, and the partial result is then the task's result.
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, CallToolResult, RequestParams
from mcp_types.jsonrpc import INVALID_PARAMS

from offload.engine.states import COMPLETED, UNFINISHED
from offload.ledger import LedgerRow
from offload.mcp_server import approvals
from offload.mcp_server.delegations import McpDelegations, McpInputError, Scope, status_message

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 1000  # subagents take seconds to minutes; a ledger read per second per client is cheap
TASK_TOOL = "delegate_task"


class TaskParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel``: the task id and the opaque state we never set."""

    task_id: str
    request_state: str | None = None


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] | None = None


def iso(epoch_s: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch_s or 0.0, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared the tasks extension for this request."""
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions)


class TasksExtension(Extension):
    """See the module docstring. ``service``: the delegations; ``scope_of``: the namespace a
    request belongs to; ``tool_result``: a finished row's ``delegation_result`` (it acknowledges)."""

    identifier = TASKS_EXTENSION

    def __init__(self, service: McpDelegations, scope_of: Callable[[Any], Scope],
                 tool_result: Callable[[LedgerRow], dict[str, Any]]) -> None:
        self.service, self.scope_of, self.tool_result = service, scope_of, tool_result

    def methods(self) -> list[MethodBinding]:
        return [MethodBinding("tasks/get", TaskParams, self._get),
                MethodBinding("tasks/update", UpdateTaskParams, self._update),
                MethodBinding("tasks/cancel", TaskParams, self._cancel)]

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        """The tool itself dispatches (its checks, the client's roots); a dispatched handle
        becomes the task when the client declared the extension."""
        result = await call_next(ctx)
        if params.name != TASK_TOOL or not declared(ctx) or not isinstance(result, CallToolResult) or result.is_error:
            return result  # an input request, a tool error or a client without tasks: unchanged
        handle = result.structured_content or {}
        if handle.get("status") != "dispatched" or not handle.get("delegation_id"):
            return result  # several units report separately: no one task stands for them
        scope = self.scope_of(ctx)
        row = await anyio.to_thread.run_sync(lambda: self.service.find(scope, handle["delegation_id"]))
        return {**self._task(row, finished=False), "resultType": "task"}

    # -- the methods ------------------------------------------------------------------------------
    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        scope, asks = self.scope_of(ctx), approvals.elicits(ctx)

        def read() -> dict[str, Any]:
            try:
                row = self._row(scope, params.task_id)
            except McpInputError as exc:
                raise MCPError(code=INVALID_PARAMS, message=f"no such task {params.task_id!r}: {exc}") from None
            return self._task(row, finished=row.state not in UNFINISHED and bool(row.event), asks=asks)
        return await anyio.to_thread.run_sync(read)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        scope, by = self.scope_of(ctx), approvals.decider(ctx)

        def update() -> None:
            try:
                row = self._row(scope, params.task_id)
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
        scope = self.scope_of(ctx)

        def cancel() -> None:
            try:
                self.service.stop(scope, params.task_id)
            except McpInputError:
                pass  # acknowledged whatever the id (SEP-2663)
        await anyio.to_thread.run_sync(cancel)
        return {}

    # -- the task shape ---------------------------------------------------------------------------
    def _row(self, scope: Scope, task_id: str) -> LedgerRow:
        """The task's row; McpInputError when the scope has no task of exactly that id."""
        row = self.service.find(scope, task_id)
        if row.delegation_id != task_id:  # a prefix is a convenience of the tools, not of task ids
            raise McpInputError(f"{task_id!r} is not a full task id")
        return row

    def _task(self, row: LedgerRow, finished: bool, asks: bool = False) -> dict[str, Any]:
        """The task of ``row``; ``asks``: the client can be asked (input_required)."""
        status = self.service.status(row)
        task: dict[str, Any] = {
            "taskId": row.delegation_id, "createdAt": iso(row.dispatched_at),
            "lastUpdatedAt": iso(row.updated_at or row.completed_at or row.dispatched_at), "ttlMs": None,
            "pollIntervalMs": POLL_INTERVAL_MS}
        waiting = approvals.pending_of(self.service.off.ledger(), row.delegation_id) if asks and not finished else []
        if waiting:
            return {**task, "status": "input_required",
                    "statusMessage": f"{len(waiting)} subagent command(s) waiting for your approval",
                    "inputRequests": {r["request_id"]: approvals.input_request(r) for r in waiting}}
        if not finished:
            return {**task, "status": "working", "statusMessage": status_message(status)}
        out = self.tool_result(row)
        return {**task, "status": "completed", "statusMessage": f"delegation {out['state']}",
                "result": {"content": [{"type": "text", "text": out["text"] or ""}], "structuredContent": out,
                           "isError": out["state"] != COMPLETED}}
