"""Approval requests of an MCP client's subagents, answered through MCP elicitation.

A client that declared the elicitation capability answers its subagents' approval requests
(``delegation.approvals: ask``, ``offload.subagents.approvals``) through ``delegation_result``:
its resolvers (``asked_request``, then ``approval_answer``: the SDK's ``Resolve``, which asks
by a server-to-client request on protocols up to 2025-11-25 and by an input-required round
after) put the delegation's oldest pending request to the client before the call waits, and
the call decides it with the answer; a wait that sees a new request ends early, saying so, so
the client's next call asks it. A client polling the delegation as an MCP task (the tasks
extension) is asked the same question as the task's ``inputRequests`` (``input_request``), keyed
by the approval request id, and answers with ``tasks/update`` (``allows_response``).
Delegations a client without the capability starts get ``NO_ELICITATION`` as their reason:
``ask`` denies at once.

Invariants: only an explicit approval allows (decline, cancel and ``approve: false`` deny); a
request answered elsewhere meanwhile (``offload approvals``) keeps that answer; a client is
asked only about delegations of its own scope. This module has no ``from __future__ import
annotations``: the SDK reads the resolvers' annotations, which must name real objects.
"""
import logging
import weakref
from typing import Annotated, Any

from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context, Elicit, Resolve
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult
from pydantic import BaseModel, Field, ValidationError

from offload.mcp_server import namespaces
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
    """Whether the client of this request (a tool's ``Context`` or a method's request context)
    declared the elicitation capability."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and getattr(capabilities, "elicitation", None) is not None


def decider(ctx: Any) -> str:
    """Who an answer from this request's client is recorded as (``namespaces.label``)."""
    return namespaces.label(ctx)


def pending_of(ledger: Any, delegation_id: str) -> "list[dict[str, Any]]":
    """The delegation's requests waiting for an answer, oldest first."""
    return [r for r in approvals.pending(ledger) if r.get("delegation_id") == delegation_id]


def waiting(ledger: Any, delegation_id: str) -> bool:
    """Whether a request of the delegation waits for an answer (a wait then ends early)."""
    return bool(pending_of(ledger, delegation_id))


def asked_request(ctx: Context, delegation_id: str) -> "dict[str, Any] | None":
    """The delegation's oldest pending request, when its client can be asked about it."""
    tools = _TOOLS.get(ctx.mcp_server)
    if tools is None or not elicits(ctx):
        return None
    try:
        row = tools.service.find(tools.scope(ctx), delegation_id)
    except Exception:  # not the client's, or unknown: the tool body says so
        return None
    found = pending_of(tools.service.off.ledger(), row.delegation_id)
    return found[0] if found else None


def approval_answer(ctx: Context, request: Annotated["dict[str, Any] | None", Resolve(asked_request)]
                    ) -> "Elicit[ApprovalAnswer] | None":
    return Elicit(message(request), ApprovalAnswer) if request else None


def message(request: dict[str, Any]) -> str:
    return (f"A subagent of delegation {request.get('delegation_id')} wants to run:\n\n    {request['command']}\n\n"
            f"It is {', '.join(request.get('categories') or [])}: {'; '.join(request.get('reasons') or [])}. "
            f"Approve it? (request {request['request_id']}; denied if nobody answers in time)")


def input_request(request: "dict[str, Any]") -> "dict[str, Any]":
    """The question about ``request`` as an input request of a task (``elicitation/create``,
    form mode, the same message and schema as the tool's elicitation), in wire form."""
    elicit = ElicitRequest(params=ElicitRequestFormParams(
        message=message(request), requested_schema=render_elicitation_schema(ApprovalAnswer)))
    return elicit.model_dump(by_alias=True, mode="json", exclude_none=True)


def allows_elicited(answer: Any) -> bool:
    """Whether the client's answer to the tool's elicitation (an ``ElicitationResult``) approves."""
    data = getattr(answer, "data", None)
    return getattr(answer, "action", None) == "accept" and bool(getattr(data, "approve", False))


def allows_response(response: Any) -> bool:
    """Whether an input response of ``tasks/update`` (an ``ElicitResult`` in wire form) approves;
    anything but an accepted ``{approve: true}`` denies."""
    try:
        result = ElicitResult.model_validate(response)
        return result.action == "accept" and ApprovalAnswer.model_validate(result.content or {}).approve
    except ValidationError:
        return False


def settle(ledger: Any, request: "dict[str, Any] | None", allow: bool, by: str) -> None:
    """Decide ``request`` (if any) with the client's answer."""
    if not request:
        return
    try:
        approvals.decide(ledger, request["request_id"], allow, by)
    except approvals.ApprovalError:
        logger.info("approval request %s was answered elsewhere first", request["request_id"])
