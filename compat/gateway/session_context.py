"""hermes path ``gateway.session_context``: the session context of a chat turn
(``offload.gateway.session_context``), plus hermes' process-wide latch: once any turn bound a
session, this process serves sessions (gateway, TUI), and ``session_context_engaged()`` says so.
``declare_stateless_channel`` does not latch it: a stateless run is not a session server.
"""
from __future__ import annotations

from contextvars import Token

from offload.gateway import session_context as _impl
from offload.gateway.session_context import (  # noqa: F401 - re-exported
    SESSION_ENV_NAMES, async_delivery_supported, clear_session_vars, declare_stateless_channel, get_session_env,
    reset_session_vars,
)

__all__ = [*_impl.__all__, "session_context_engaged"]

_session_context_engaged = False


def set_session_vars(*args: object, **fields: object) -> list[Token]:
    """Bind the identity of the turn about to run in this context; returns the tokens."""
    global _session_context_engaged
    tokens = _impl.set_session_vars(*args, **fields)  # type: ignore[arg-type]
    _session_context_engaged = True
    return tokens


def session_context_engaged() -> bool:
    return _session_context_engaged
