"""Which session the running turn belongs to, as seen by tools (approvals, delegate_task).

Owns the ``approval_session_key`` ContextVar, and the ``approval_no_ask_reason`` one (whether
anyone can answer the approval requests of subagents a request starts: an MCP client without
elicitation cannot). A frontend that runs one turn at a time binds it
with ``set_current_session_key`` and restores it with ``reset_current_session_key``; tools read
it with ``get_current_session_key``.

Invariant: an explicitly bound, non-empty key wins; otherwise the key comes from the session
env (``HERMES_SESSION_KEY`` via ``offload.context.session_env.get_session_env``: ContextVar if ever set,
then ``os.environ``), then the caller's default. The fallback reads offload/context/session_env.py, not
the gateway package, because the tool layer never imports the gateway.
"""
from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any

from offload.context.session_env import get_session_env

_approval_session_key: ContextVar[str] = ContextVar("approval_session_key", default="")
_UNSET = object()
# Why nobody can answer approval requests of subagents started in this context (None: someone can).
_no_ask_reason: ContextVar[Any] = ContextVar("approval_no_ask_reason", default=_UNSET)


def set_current_session_key(key: str | None) -> Token:
    """Bind *key* (None becomes "") for this context; pass the token to reset."""
    return _approval_session_key.set(key or "")


def reset_current_session_key(token: Token) -> None:
    """Restore the key that was bound before the matching ``set_current_session_key``."""
    _approval_session_key.reset(token)


def get_current_session_key(default: str = "default") -> str:
    """The session key of the running turn (``delegate_task`` passes ``default=""``)."""
    key = _approval_session_key.get()
    if key:
        return key
    return get_session_env("HERMES_SESSION_KEY", default)


def set_no_ask_reason(reason: str | None) -> Token:
    """Bind for delegations started in this context (an MCP request) why nobody can answer
    their subagents' approval requests (None: someone can); pass the token to reset."""
    return _no_ask_reason.set(reason)


def reset_no_ask_reason(token: Token) -> None:
    _no_ask_reason.reset(token)


def current_no_ask_reason(default: str | None) -> str | None:
    """The bound reason, else ``default`` (the runtime's, ``Offload.set_approval_surface``)."""
    value = _no_ask_reason.get()
    return default if value is _UNSET else value
