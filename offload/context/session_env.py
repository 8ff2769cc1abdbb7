"""Task-local session identity: which platform, chat, user and session the running turn serves.

Owns the ContextVars -- one per legacy env var name (``HERMES_SESSION_PLATFORM``,
``HERMES_SESSION_KEY``, ``HERMES_UI_SESSION_ID``, ...) plus the async-delivery capability
``HERMES_SESSION_ASYNC_DELIVERY`` -- and the primitive readers and writers over them.

Why here and not in gateway/: layers point down, so tools/ must never import gateway/, yet
``delegate_task`` and ``tools/approval_context.py`` must read the session identity to route a
background result back to its chat. The session-shaped public API (``set_session_vars`` and
friends) lives in ``gateway/session_context.py``, which wraps the writers below and re-exports
the readers; tools code imports from this module directly.

Invariant: a var that was ever set in the current context -- even to ``""`` -- wins over
``os.environ``; only a never-set var falls back to the process environment. A process-wide
env var therefore cannot leak one chat's identity into another chat's turn once a session has
been bound (or explicitly cleared) in that context.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import Final


class _Unset:
    """Sentinel for "never set in this context"; distinct from "" (explicitly cleared)."""

    def __repr__(self) -> str:
        return "<UNSET>"


UNSET: Final = _Unset()

SESSION_ENV_NAMES: Final[tuple[str, ...]] = (
    "HERMES_SESSION_PLATFORM",
    "HERMES_SESSION_SOURCE",
    "HERMES_SESSION_CHAT_ID",
    "HERMES_SESSION_CHAT_TYPE",
    "HERMES_SESSION_CHAT_NAME",
    "HERMES_SESSION_THREAD_ID",
    "HERMES_SESSION_USER_ID",
    "HERMES_SESSION_USER_NAME",
    "HERMES_SESSION_SCOPE_ID",
    "HERMES_SESSION_KEY",
    "HERMES_SESSION_ID",
    "HERMES_UI_SESSION_ID",
)
ASYNC_DELIVERY_NAME: Final = "HERMES_SESSION_ASYNC_DELIVERY"
# A stateless channel (no push back to this turn) that can still be WOKEN later at a raw session
# id: an API-server request, or `offload run --resume SID`. Background results go to that id.
WAKE_SESSION_NAME: Final = "HERMES_SESSION_WAKE_ID"

_VARS: Final[dict[str, ContextVar[str | _Unset]]] = {
    name: ContextVar(name, default=UNSET) for name in SESSION_ENV_NAMES
}
_ASYNC_DELIVERY: Final[ContextVar[bool | _Unset]] = ContextVar(ASYNC_DELIVERY_NAME, default=UNSET)
_WAKE_SESSION: Final[ContextVar[str]] = ContextVar(WAKE_SESSION_NAME, default="")


def get_session_env(name: str, default: str = "") -> str:
    """The session value for *name*: the ContextVar if ever set (even to ""), else the
    process environment, else *default*. Names without a ContextVar read the environment."""
    var = _VARS.get(name)
    if var is not None:
        value = var.get()
        if not isinstance(value, _Unset):
            return value
    return os.environ.get(name, default)


def async_delivery_supported() -> bool:
    """Whether a background result can come back to this turn's channel later.

    Never-set counts as supported; only an explicit False (a stateless channel such as a
    one-shot run) says no, so ``delegate_task`` can fall back to running synchronously.
    """
    return _ASYNC_DELIVERY.get() is not False


def bind_session_env(values: Mapping[str, str], *, async_delivery: bool) -> list[Token]:
    """Set EVERY session var (missing names become "") and the async-delivery flag."""
    unknown = sorted(set(values) - set(_VARS))
    if unknown:
        raise KeyError(f"not session env names: {', '.join(unknown)}; known: {', '.join(SESSION_ENV_NAMES)}")
    tokens: list[Token] = [var.set(str(values.get(name) or "")) for name, var in _VARS.items()]
    tokens.append(_ASYNC_DELIVERY.set(bool(async_delivery)))
    return tokens


def clear_session_env() -> None:
    """Mark every var explicitly empty (blocking the env fallback); async delivery -> unset."""
    for var in _VARS.values():
        var.set("")
    _ASYNC_DELIVERY.set(UNSET)
    _WAKE_SESSION.set("")


def reset_session_env() -> None:
    """Forget everything bound in this context, as for a fresh task."""
    for var in _VARS.values():
        var.set(UNSET)
    _ASYNC_DELIVERY.set(UNSET)
    _WAKE_SESSION.set("")


def set_async_delivery(supported: bool) -> Token:
    return _ASYNC_DELIVERY.set(bool(supported))


def set_wake_session(session_id: str) -> Token:
    """Declare this turn's channel wakeable later at ``session_id`` (see ``WAKE_SESSION_NAME``)."""
    return _WAKE_SESSION.set(str(session_id or ""))


def reset_wake_session(token: Token) -> None:
    _WAKE_SESSION.reset(token)


def wake_session_id() -> str:
    """The raw session id a stateless channel can be woken at later, or "" if none."""
    return _WAKE_SESSION.get()


def resolve_wake_session() -> str | None:
    """Where a background result of this turn can go: "" = pushed back to this channel, a raw
    session id = delivered when that session is woken, None = nowhere (run it inline)."""
    if async_delivery_supported():
        return ""
    return wake_session_id() or None
