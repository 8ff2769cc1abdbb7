"""Approval requests of an MCP client's subagents, answered through MCP elicitation.

A client that declared the elicitation capability answers its subagents' approval requests
(``delegation.approvals: ask``, ``offload.subagents.approvals``) through ``delegation_result``:
its resolvers (``asked_request``, then ``approval_answer``: the SDK's ``Resolve``, which asks
by a server-to-client request on protocols up to 2025-11-25 and by an input-required round
after) put the delegation's oldest pending request to the client before the call waits, and
the call decides it with the answer; a wait that sees a new request ends early, saying so, so
the client's next call asks it. Delegations a client without the capability starts get
``NO_ELICITATION`` as their reason: ``ask`` denies at once.

Invariants: only an explicit approval allows (decline, cancel and ``approve: false`` deny); a
request answered elsewhere meanwhile (``offload approvals``) keeps that answer; a client is
asked only about delegations of its own scope. This module has no ``from __future__ import
annotations``: the SDK reads the resolvers' annotations, which must name real objects.
"""
import logging
import weakref
from typing import Annotated, Any

from mcp.server.mcpserver import Context, Elicit, Resolve
from pydantic import BaseModel, Field

from offload.subagents import approvals

logger = logging.getLogger(__name__)

NO_ELICITATION = ("the MCP client that started this delegation did not declare the elicitation capability, so "
                  "nobody can be asked (the operator can allow the category with delegation.approvals_by_category)")
WAITING_NOTE = ("A subagent's command is waiting for your approval: call delegation_result again to answer it "
                "(it is denied if nobody answers in time).")
_TOOLS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # MCPServer -> its Tools


class ApprovalAnswer(BaseModel):
    approve: bool = Field(description="true: run the command; false: refuse it")


def register(server: Any, tools: Any) -> None:
    """Let the resolvers of ``server``'s requests find its ``Tools`` (service and scope)."""
    _TOOLS[server] = tools


def elicits(ctx: Any) -> bool:
    """Whether the client of this request declared the elicitation capability."""
    capabilities = getattr(ctx, "client_capabilities", None)
    return capabilities is not None and getattr(capabilities, "elicitation", None) is not None


def waiting(ledger: Any, delegation_id: str) -> bool:
    """Whether a request of the delegation waits for an answer (a wait then ends early)."""
    return any(r.get("delegation_id") == delegation_id for r in approvals.pending(ledger))


def asked_request(ctx: Context, delegation_id: str) -> "dict[str, Any] | None":
    """The delegation's oldest pending request, when its client can be asked about it."""
    tools = _TOOLS.get(ctx.mcp_server)
    if tools is None or not elicits(ctx):
        return None
    try:
        row = tools.service.find(tools.scope(ctx), delegation_id)
    except Exception:  # not the client's, or unknown: the tool body says so
        return None
    found = [r for r in approvals.pending(tools.service.off.ledger()) if r.get("delegation_id") == row.delegation_id]
    return found[0] if found else None


def approval_answer(ctx: Context, request: Annotated["dict[str, Any] | None", Resolve(asked_request)]
                    ) -> "Elicit[ApprovalAnswer] | None":
    return Elicit(message(request), ApprovalAnswer) if request else None


def message(request: dict[str, Any]) -> str:
    return (f"A subagent of delegation {request.get('delegation_id')} wants to run:\n\n    {request['command']}\n\n"
            f"It is {', '.join(request.get('categories') or [])}: {'; '.join(request.get('reasons') or [])}. "
            f"Approve it? (request {request['request_id']}; denied if nobody answers in time)")


def settle(ledger: Any, request: "dict[str, Any] | None", answer: Any, by: str) -> None:
    """Decide ``request`` with the client's ``answer`` (an ``ElicitationResult``)."""
    if not request:
        return
    data = getattr(answer, "data", None)
    allow = getattr(answer, "action", None) == "accept" and bool(getattr(data, "approve", False))
    try:
        approvals.decide(ledger, request["request_id"], allow, by)
    except approvals.ApprovalError:
        logger.info("approval request %s was answered elsewhere first", request["request_id"])
