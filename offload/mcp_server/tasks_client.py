"""The client half of MCP Tasks (``io.modelcontextprotocol/tasks``, SEP-2663) on the SDK's
client extension API: ``Client(..., extensions=[TasksClient()])`` declares the extension, and a
``delegate_task`` answered with a task is polled with ``tasks/get`` until it finishes, so
``call_tool`` still returns the tool's result. ``on_task`` sees every task state (the created
one first), e.g. to keep the task id for after a restart. A task in ``input_required`` (a
subagent's command waiting for approval) has its ``inputRequests`` put through the client's
own callbacks (its ``elicitation_callback``, as a standalone ``elicitation/create`` would be)
and answered with ``tasks/update``.

Invariants: the poll honours the server's ``pollIntervalMs`` and ends only on a
terminal status; a ``failed`` or ``cancelled`` task becomes an ``isError`` tool result; each
input request key is answered once, however many polls repeat it (the extension's rule).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ErrorData, InputRequest, Request, Result, TextContent
from pydantic import ConfigDict, TypeAdapter

from offload.mcp_server.tasks import TASKS_EXTENSION, TaskParams, UpdateTaskParams

TERMINAL = frozenset({"completed", "failed", "cancelled"})
MIN_POLL_S = 0.05


class CreateTaskResult(Result):
    """``resultType: "task"``: the seed state of a task."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskState(Result):
    """A ``tasks/get`` answer: the task, with ``result`` or ``error`` once terminal."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class GetTaskRequest(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # the Mcp-Name header SEP-2663 asks for over HTTP


class CancelTaskRequest(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


_INPUT_REQUEST: TypeAdapter[Any] = TypeAdapter(InputRequest)


OnTask = Callable[[dict[str, Any]], Awaitable[None]]


class TasksClient(ClientExtension):
    identifier = TASKS_EXTENSION

    def __init__(self, on_task: OnTask | None = None) -> None:
        self.on_task = on_task

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        await self._tell(created)
        return await poll(ctx.session, created.task_id, created.poll_interval_ms, self._tell)

    async def _tell(self, state: Result) -> None:
        if self.on_task is not None:
            await self.on_task(state.model_dump(by_alias=True, mode="json", exclude_none=True))


async def get_task(session: Any, task_id: str) -> TaskState:
    return await session.send_request(GetTaskRequest(params=TaskParams(task_id=task_id)), TaskState)


async def cancel_task(session: Any, task_id: str) -> None:
    await session.send_request(CancelTaskRequest(params=TaskParams(task_id=task_id)), Result)


async def update_task(session: Any, task_id: str, input_responses: dict[str, Any]) -> None:
    params = UpdateTaskParams(task_id=task_id, input_responses=input_responses)
    await session.send_request(UpdateTaskRequest(params=params), Result)


async def answer_inputs(session: Any, state: TaskState, answered: set[str]) -> None:
    """Put each input request of ``state`` not yet ``answered`` through the client's callbacks
    and send the answers in one ``tasks/update``; a callback's refusal raises ``MCPError``."""
    responses: dict[str, Any] = {}
    for key, raw in (state.input_requests or {}).items():
        if key in answered:
            continue
        request = _INPUT_REQUEST.validate_python(raw)
        ctx = ClientRequestContext(session=session, request_id=key, meta=request.params.meta if request.params else None)
        response = await session.dispatch_input_request(ctx, request)
        if isinstance(response, ErrorData):
            raise MCPError.from_error_data(response)
        responses[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
    if responses:
        await update_task(session, state.task_id, responses)
        answered.update(responses)


async def poll(session: Any, task_id: str, interval_ms: int | None = None,
               on_state: Callable[[TaskState], Awaitable[None]] | None = None) -> CallToolResult:
    """``tasks/get`` until the task is terminal, answering its input requests; its tool result."""
    answered: set[str] = set()
    while True:
        state = await get_task(session, task_id)
        if on_state is not None:
            await on_state(state)
        if state.status in TERMINAL:
            return as_tool_result(state)
        if state.status == "input_required":
            await answer_inputs(session, state, answered)
        await anyio.sleep(max(MIN_POLL_S, (state.poll_interval_ms or interval_ms or 1000) / 1000))


def as_tool_result(state: TaskState) -> CallToolResult:
    if state.status == "completed" and state.result is not None:
        return CallToolResult.model_validate(state.result)
    reason = (state.error or {}).get("message") or state.status_message or state.status
    return CallToolResult(content=[TextContent(text=f"task {state.task_id} {state.status}: {reason}")], is_error=True)
