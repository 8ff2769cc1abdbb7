"""Who is asking: the namespace of one MCP request, decided by the transport it came over.

- Streamable HTTP: the bearer token the request carried, whose name ``http.BearerGuard`` puts in
  the request's state (``offload_token``). Each named token of the home's store (``offload token
  add NAME``) is the namespace ``token:NAME``; the operator's token (the store's ``operator``, or
  ``$OFFLOAD_MCP_TOKEN``) is ``--namespace`` when the server was started with one, else
  ``token:operator``; ``--all-namespaces`` is the operator token's alone (a named token keeps
  its own namespace on such a server).
- stdio: only the process that started the server talks to it, and local processes of one user
  are equally trusted, so the boundary is the home plus ``--namespace``; without it, the
  namespace is the client's reported name and the server's directory (``default_namespace``),
  so a client restarting in the same project finds its delegations again.

Invariants: over HTTP the client's reported name (``clientInfo.name``) is a label only (who
answered an approval), never part of a namespace; an HTTP request without a verified token name
has no namespace (refused, never defaulted); a token scope re-checks its token at every ledger
read (``Scope.check``), so a revoked or rotated token's long wait ends refused and never
acknowledges a result.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from offload.mcp_server.delegations import McpInputError, Scope
from offload.access.tokens import OPERATOR

TOKEN_PREFIX = "token:"
STATE_TOKEN = "offload_token"  # the accepting token's name, set by http.BearerGuard
STATE_LIVE = "offload_token_live"  # () -> whether that token is still accepted, set by http.BearerGuard
UNVERIFIED = ("this HTTP request reached the MCP tools without a verified token (the server must be served by "
              "offload.mcp_server.http, behind its BearerGuard); refused")


def client_name(ctx: Any) -> str | None:
    """The name the client reported (``ctx``: a tool's ``Context`` or a method's request context)."""
    params = ctx.session.client_params
    return params.client_info.name if params is not None and params.client_info is not None else None


def default_namespace(client_name: str | None, cwd: Path | None = None) -> str:
    """stdio's default: the client's reported name and the server's working directory; the same
    client restarting in the same project finds its delegations again, another project does not."""
    return f"{client_name or 'mcp-client'}@{(cwd or Path.cwd()).resolve()}"


def http_state(ctx: Any) -> Any | None:
    """The request state of an HTTP request (a starlette ``State``), None over stdio."""
    inner = getattr(ctx, "request_context", ctx)  # a tool's Context wraps the method's request context
    request = getattr(inner, "request", None)
    return getattr(request, "state", None) if request is not None else None


def token_of(ctx: Any) -> tuple[str, Callable[[], bool] | None] | None:
    """(the token's name, its liveness check) of an HTTP request; None over stdio."""
    state = http_state(ctx)
    if state is None:
        return None
    name = getattr(state, STATE_TOKEN, None)
    if not isinstance(name, str) or not name:
        raise McpInputError(UNVERIFIED)
    return name, getattr(state, STATE_LIVE, None)


class Namespaces:
    """The namespace policy of one server: ``namespace`` (``--namespace``): stdio's for every
    client, HTTP's for the operator token; ``all_namespaces``: the operator's view (stdio, or the
    operator token over HTTP)."""

    def __init__(self, namespace: str | None = None, all_namespaces: bool = False) -> None:
        self.namespace, self.all_namespaces = namespace, all_namespaces

    def scope(self, ctx: Any) -> Scope:
        token = token_of(ctx)
        if token is None:  # stdio
            return Scope(None) if self.all_namespaces else Scope(self.namespace or default_namespace(client_name(ctx)))
        name, live = token
        if name == OPERATOR and self.all_namespaces:
            return Scope(None, token=name, live=live)
        if name == OPERATOR and self.namespace:
            return Scope(self.namespace, token=name, live=live)
        return Scope(TOKEN_PREFIX + name, token=name, live=live)


def label(ctx: Any) -> str:
    """Who a request's client is, as an approval records who decided: its reported name, and
    over HTTP the token it proved itself with (``mcp:claude via token claude-code``)."""
    token = token_of(ctx)
    shown = f"mcp:{client_name(ctx) or 'client'}"
    return shown if token is None else f"{shown} via token {token[0]}"
