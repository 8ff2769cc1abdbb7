"""The five MCP tools of ``offload mcp`` on the official SDK's ``MCPServer``: ``delegate_task``,
``delegation_status``, ``delegation_result``, ``list_delegations`` and ``stop_delegation``.

Invariants: a tool never raises to the client — bad input comes back as a tool error
(``isError``) whose text names the fix, and the server keeps serving; ``delegation_status`` and
``delegation_result`` return structured content with a ``state`` field beside the text; the
ledger work runs on worker threads, so a long ``delegation_result`` wait never blocks the
event loop (it sends progress notifications: queued, started, each child done).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any, Awaitable, Callable
from urllib.parse import unquote, urlsplit

import anyio.to_thread
from mcp.server.mcpserver import Context, ElicitationResult, ListRoots, MCPServer, Resolve
from mcp_types import CallToolResult, ListRootsResult, TextContent

from pydantic import Field

from offload.mcp_server import approvals, schemas
from offload.subagents.args import TaskArgs
from offload.toolsets.toolset_names import KNOWN_TOOLSETS
from offload.mcp_server.approvals import ApprovalAnswer, approval_answer, asked_request
from offload.engine.states import UNFINISHED as UNFINISHED_STATES
from offload.mcp_server.first_run import FirstRun
from offload.mcp_server.delegations import McpDelegations, McpInputError, Scope, resume_message
from offload.mcp_server.namespaces import Namespaces

logger = logging.getLogger(__name__)

DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 3600.0
TOOLSETS = f"Toolsets the subagents may use (default: all this server allows), among {', '.join(KNOWN_TOOLSETS)}."
DelegationId = Annotated[str, Field(min_length=1, description=schemas.DELEGATION_ID)]
WaitS = Annotated[float, Field(ge=0, le=MAX_WAIT_S, description=schemas.WAIT_S)]
Limit = Annotated[int, Field(ge=1, le=1000, description=schemas.LIMIT)]
LEGACY_RESULT_WAIT_S = 60.0  # tasks/result blocks until the task ends, re-reading at least this often
INSTRUCTIONS = ("offload runs subagents in the background and keeps every delegation in a durable ledger. "
                "delegate_task returns a delegation_id at once; keep working, then collect the result with "
                "delegation_result (wait_s waits for it) or watch it with delegation_status. Results survive a "
                "restart of this server.")


def _tool_result(payload: dict[str, Any], text: str | None = None) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text if text is not None else json.dumps(payload, default=str))],
                          structured_content=payload)


def _tool_error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=message)], is_error=True)


def _result_text(out: dict[str, Any]) -> str:
    note = resume_message(out)
    if out.get("text") is not None:
        return out["text"] + (f"\n\n({note})" if note else "")
    return (f"{out['delegation_id']} is still {out['state']} ({out['children_done']}/{out['children_total']} "
            f"children done{f'; {note}' if note else ''}); call delegation_result again with wait_s to keep waiting.")


def client_roots(ctx: Context) -> ListRoots | None:
    """Ask the client for its roots (MCP roots) when it offers them."""
    capabilities = ctx.client_capabilities
    return ListRoots() if capabilities is not None and capabilities.roots is not None else None


def first_root(roots: ListRootsResult | None) -> Path | None:
    """The client's first root that is a directory here (a ``file://`` URI), else None."""
    for root in (roots.roots if roots is not None else []):
        parts = urlsplit(str(root.uri))
        path = Path(unquote(parts.path)) if parts.scheme == "file" else None
        if path is not None and path.is_dir():
            return path.resolve()
        logger.warning("ignoring the client's root %s: not a directory on this machine", root.uri)
    return None


class Tools:
    """The tool functions over one ``McpDelegations``; ``namespace`` (``--namespace``) and
    ``all_namespaces`` (an operator's view): how they decide each request's namespace is
    ``namespaces.Namespaces``'s (per transport: the token over HTTP, the client over stdio)."""

    def __init__(self, service: McpDelegations, namespace: str | None = None, all_namespaces: bool = False,
                 use_roots: bool = True, first_run: FirstRun | None = None) -> None:
        self.service, self.namespaces = service, Namespaces(namespace, all_namespaces)
        self.use_roots = use_roots  # False: --workspace was given, and it wins over the client's roots
        self.first_run = first_run or FirstRun()

    def scope(self, ctx: Any) -> Scope:
        """The namespace of a request (``ctx``: a tool's ``Context`` or a method's request context)."""
        return self.namespaces.scope(ctx)

    async def _call(self, work: Callable[[], CallToolResult]) -> CallToolResult:
        return await self._call_async(lambda: anyio.to_thread.run_sync(work))

    async def _call_async(self, work: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
        try:
            return await work()
        except McpInputError as exc:
            return _tool_error(str(exc))
        except Exception as exc:  # the tool boundary: the client gets a reason, the server keeps serving
            logger.exception("offload mcp tool failed")
            return _tool_error(f"offload failed unexpectedly ({type(exc).__name__}: {exc}); retry once, and if it "
                               "fails again see the server's log (stderr)")

    async def delegate_task(self, ctx: Context, goal: Annotated[str | None, Field(description=schemas.GOAL)] = None,
                            tasks: Annotated[list[TaskArgs] | None, Field(description=schemas.TASKS)] = None,
                            context: Annotated[str | None, Field(description=schemas.CONTEXT)] = None,
                            toolsets: Annotated[list[str] | None, Field(description=TOOLSETS)] = None,
                            roots: Annotated[ListRootsResult | None, Resolve(client_roots)] = None) -> CallToolResult:
        scope = self.scope(ctx)
        listed = [t.model_dump(exclude_none=True) for t in tasks] if tasks is not None else None
        arguments = {k: v for k, v in (("goal", goal), ("tasks", listed), ("context", context),
                                       ("toolsets", toolsets)) if v is not None}
        workspace = first_root(roots) if self.use_roots else None
        refusal = self.first_run.problem(workspace)
        if refusal:
            return _tool_error(refusal)
        no_ask = None if approvals.elicits(ctx) else approvals.NO_ELICITATION
        return await self._call(lambda: _tool_result(self.service.delegate(scope, arguments, workspace, no_ask)))

    async def delegation_status(self, ctx: Context, delegation_id: DelegationId) -> CallToolResult:
        scope = self.scope(ctx)
        return await self._call(lambda: _tool_result(self.service.status(self.service.find(scope, delegation_id))))

    async def delegation_result(
            self, ctx: Context, delegation_id: DelegationId, wait_s: WaitS = DEFAULT_WAIT_S,
            request: Annotated[dict[str, Any] | None, Resolve(asked_request)] = None,
            answer: Annotated[ElicitationResult[ApprovalAnswer], Resolve(approval_answer)] = None) -> CallToolResult:
        scope = self.scope(ctx)

        elicits = approvals.elicits(ctx)
        ledger = self.service.off.ledger()
        asked = (lambda did: approvals.waiting(ledger, did)) if elicits else None

        async def work() -> CallToolResult:
            await anyio.to_thread.run_sync(lambda: approvals.settle(ledger, request, approvals.allows_elicited(answer),
                                                                    approvals.decider(ctx)))
            row = await self.service.wait(scope, delegation_id, wait_s, ctx.report_progress, asked)
            out = await anyio.to_thread.run_sync(lambda: self.service.result(row))
            if asked is not None and out.get("state") in UNFINISHED_STATES and asked(out["delegation_id"]):
                out["note"] = approvals.WAITING_NOTE
                return _tool_result(out, f"{approvals.WAITING_NOTE} ({_result_text(out)})")
            return _tool_result(out, _result_text(out))
        return await self._call_async(work)

    async def list_delegations(self, ctx: Context, limit: Limit = 50) -> CallToolResult:
        scope = self.scope(ctx)
        return await self._call(lambda: _tool_result({"delegations": self.service.listing(scope, max(1, limit))}))

    async def stop_delegation(self, ctx: Context, delegation_id: DelegationId) -> CallToolResult:
        scope = self.scope(ctx)
        return await self._call(lambda: _tool_result(self.service.stop(scope, delegation_id)))


def build_server(tools: Tools) -> MCPServer:
    """An ``MCPServer`` named ``offload`` with the five tools and the tasks extension."""
    from offload import __version__

    from offload.mcp_server.tasks import TasksExtension

    from offload.mcp_server.tasks_legacy import LegacyTasks

    service = tools.service
    legacy = LegacyTasks(service, tools.scope, service.result,
                         lambda scope, did: service.wait(scope, did, LEGACY_RESULT_WAIT_S))
    tasks = TasksExtension(service, tools.scope, service.result, legacy)
    surface = schemas.ToolSurface(lambda: _input_schemas(server))
    server = MCPServer("offload", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING",
                       extensions=[tasks], middleware=[schemas.Unoffered(), surface, legacy])
    approvals.register(server, tools)  # the approval resolvers find the service through it
    for fn in (tools.delegate_task, tools.delegation_status, tools.delegation_result, tools.list_delegations,
               tools.stop_delegation):
        shown = schemas.TOOLS[fn.__name__]
        server.add_tool(fn, name=fn.__name__, title=shown["title"], description=shown["description"],
                        annotations=shown["annotations"])
    return server


async def _input_schemas(server: MCPServer) -> dict[str, Any]:
    return {tool.name: tool.input_schema for tool in await server.list_tools()}
