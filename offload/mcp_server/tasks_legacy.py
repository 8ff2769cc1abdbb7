"""The 2025-11-25 core tasks for ``delegate_task`` (the TypeScript SDK's ``params.task``, the MCP
Inspector): ``CreateTaskResult``, ``tasks/get``, ``tasks/result``, ``tasks/list`` and
``tasks/cancel`` on that protocol, over the same ledger rows as the 2026-07-28 extension
(``tasks``).

The SDK serves 2025-11-25 tasks as types only, so this module is a server middleware (it
rewrites what the SDK's own handlers produce) plus the methods the extension binds:
- ``initialize`` answered on 2025-11-25 advertises ``capabilities.tasks`` (list, cancel,
  ``tools/call``), and ``tools/list`` marks ``delegate_task`` ``taskSupport: optional``;
- a ``tools/call delegate_task`` with ``params.task`` is known to want a task before it
  dispatches; its dispatched handle becomes ``{"task": ...}`` with no further read, so nothing
  after the dispatch can fail; a tool error (nothing dispatched) stays a tool error.

Invariants: a task is ``working``, ``cancelled`` (stopped) or ``completed``, never back from a
terminal status; ``tasks/result`` waits (on the server's shared watcher, no thread) until the
task is terminal, returns the ``delegation_result`` tool result with the related-task ``_meta``
and acknowledges it; ``tasks/cancel`` of a terminal task is refused (-32602), as the spec says;
ids of another namespace are "no such task". Approval requests are not put as
``input_required`` on this protocol: the 2026-07-28 extension and ``delegation_result`` ask them.
"""
from __future__ import annotations

from typing import Any, Callable

import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import PaginatedRequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from offload.ledger import LedgerRow
from offload.mcp_server.delegations import McpDelegations, McpInputError, Scope, finished_message, status_message
from offload.mcp_server.tasks import (
    POLL_INTERVAL_MS, TASK_TOOL, TaskParams, created_task, finished, iso, modern, task_row, task_status,
    wire_tool_result,
)

LEGACY = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
LISTED_MAX = 100


def legacy_task(task: dict[str, Any]) -> dict[str, Any]:
    """A task in the 2026 shape (``ttlMs``, ``pollIntervalMs``) in the 2025-11-25 one."""
    out = {k: v for k, v in task.items() if k not in ("ttlMs", "pollIntervalMs", "result", "resultType")}
    return {**out, "ttl": None, "pollInterval": POLL_INTERVAL_MS}


class LegacyTasks:
    """See the module docstring. ``wait(scope, id)`` (async) returns the row once it finished."""

    def __init__(self, service: McpDelegations, scope_of: Callable[[Any], Scope],
                 tool_result: Callable[[LedgerRow], dict[str, Any]], wait: Callable[..., Any]) -> None:
        self.service, self.scope_of, self.tool_result, self.wait = service, scope_of, tool_result, wait

    def methods(self) -> list[MethodBinding]:
        versions = frozenset({LEGACY})
        return [MethodBinding("tasks/result", TaskParams, self.result, versions),
                MethodBinding("tasks/list", PaginatedRequestParams, self.list, versions)]

    # -- the middleware ---------------------------------------------------------------------------
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params or {}
        wants_task = (ctx.method == "tools/call" and not modern(ctx) and params.get("name") == TASK_TOOL
                      and isinstance(params.get("task"), dict))
        result = await call_next(ctx)
        if not isinstance(result, dict):
            return result
        if ctx.method == "initialize" and result.get("protocolVersion") == LEGACY:
            return {**result, "capabilities": {**(result.get("capabilities") or {}), "tasks": CAPABILITY}}
        if ctx.method == "tools/list" and ctx.protocol_version == LEGACY:
            return {**result, "tools": [{**t, "execution": {"taskSupport": "optional"}} if t.get("name") == TASK_TOOL
                                        else t for t in result.get("tools") or []]}
        if wants_task and not result.get("isError"):
            handle = result.get("structuredContent") or {}
            if handle.get("status") == "dispatched" and handle.get("delegation_id") and not handle.get("units"):
                return {"task": legacy_task(created_task(handle))}
        return result

    # -- the methods ------------------------------------------------------------------------------
    def _row(self, scope: Scope, task_id: str) -> LedgerRow:
        try:
            return task_row(self.service, scope, task_id)
        except McpInputError as exc:
            raise MCPError(code=INVALID_PARAMS, message=f"no such task {task_id!r}: {exc}") from None

    def task(self, row: LedgerRow) -> dict[str, Any]:
        status = task_status(row, self.service.cancelling(row.delegation_id))
        message = {"working": lambda: status_message(self.service.status(row)),
                   "cancelled": lambda: "stopped: collect the partial result with tasks/result",
                   "completed": lambda: finished_message(row)}[status]()
        return legacy_task({"taskId": row.delegation_id, "status": status, "statusMessage": message,
                            "createdAt": iso(row.dispatched_at),
                            "lastUpdatedAt": iso(row.updated_at or row.completed_at or row.dispatched_at)})

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        scope = self.scope_of(ctx)
        return await anyio.to_thread.run_sync(lambda: self.task(self._row(scope, params.task_id)))

    async def result(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        scope = self.scope_of(ctx)
        row = await anyio.to_thread.run_sync(lambda: self._row(scope, params.task_id))
        while not finished(row):
            if self.service.watcher.closing:
                raise MCPError(code=INTERNAL_ERROR, message=f"the server is shutting down; task {row.delegation_id} "
                               "goes on: call tasks/result again after it restarts")
            row = await self.wait(scope, row.delegation_id)
        out = await anyio.to_thread.run_sync(lambda: self.tool_result(row))
        return {**wire_tool_result(out), "_meta": {RELATED_TASK: {"taskId": row.delegation_id}}}

    async def list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams) -> dict[str, Any]:
        scope = self.scope_of(ctx)

        def tasks() -> list[dict[str, Any]]:
            return [self.task(row) for row in self.service.rows(scope)[:LISTED_MAX]]
        return {"tasks": await anyio.to_thread.run_sync(tasks)}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        scope = self.scope_of(ctx)

        def cancel() -> dict[str, Any]:
            row = self._row(scope, params.task_id)
            if task_status(row, self.service.cancelling(row.delegation_id)) != "working":
                raise MCPError(code=INVALID_PARAMS, message=f"task {row.delegation_id} already finished "
                               f"({row.state}); nothing to cancel")
            self.service.stop(scope, row.delegation_id)
            return self.task(self.service.find(scope, row.delegation_id))
        return await anyio.to_thread.run_sync(cancel)
