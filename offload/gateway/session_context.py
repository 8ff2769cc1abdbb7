"""Session context for a chat turn: the public API the gateway, CLI and TUI call around a turn
to say which platform, chat, user and session it serves.

The ContextVars themselves live in ``offload.context.session_env`` so the tool layer can read
them without importing the gateway (layers point down); this module wraps their writers under
the session-shaped names below and re-exports the readers (``get_session_env``,
``async_delivery_supported``) for gateway-side callers. It holds no state of its own (hermes'
process-wide "a session was bound" latch lives in the compat adapter ``gateway.session_context``).

Invariants:
- ``set_session_vars`` binds every var at once, so no field survives from a previous turn;
  calls are not meant to nest.
- ``clear_session_vars`` sets every var to ``""`` instead of restoring through the tokens: a
  token can only be reset in the Context that created it, and a turn is often cleared from a
  different task or callback. ``""`` still blocks the ``os.environ`` fallback, so a cleared
  context never picks up a process-wide identity.
"""
from __future__ import annotations

from contextvars import Token

from offload.context import session_env
from offload.context.session_env import SESSION_ENV_NAMES, async_delivery_supported, get_session_env

__all__ = [
    "SESSION_ENV_NAMES",
    "async_delivery_supported",
    "clear_session_vars",
    "declare_stateless_channel",
    "get_session_env",
    "reset_session_vars",
    "set_session_vars",
]


def set_session_vars(
    platform: str = "",
    source: str = "",
    chat_id: str = "",
    chat_type: str = "",
    chat_name: str = "",
    thread_id: str = "",
    user_id: str = "",
    user_name: str = "",
    scope_id: str = "",
    session_key: str = "",
    session_id: str = "",
    ui_session_id: str = "",
    async_delivery: bool = True,
) -> list[Token]:
    """Bind the identity of the turn about to run in this context; returns the tokens."""
    return session_env.bind_session_env(
        {
            "HERMES_SESSION_PLATFORM": platform,
            "HERMES_SESSION_SOURCE": source,
            "HERMES_SESSION_CHAT_ID": chat_id,
            "HERMES_SESSION_CHAT_TYPE": chat_type,
            "HERMES_SESSION_CHAT_NAME": chat_name,
            "HERMES_SESSION_THREAD_ID": thread_id,
            "HERMES_SESSION_USER_ID": user_id,
            "HERMES_SESSION_USER_NAME": user_name,
            "HERMES_SESSION_SCOPE_ID": scope_id,
            "HERMES_SESSION_KEY": session_key,
            "HERMES_SESSION_ID": session_id,
            "HERMES_UI_SESSION_ID": ui_session_id,
        },
        async_delivery=async_delivery,
    )


def clear_session_vars(tokens: list[Token] | None = None) -> None:
    """End the turn: every var becomes "" and async delivery returns to its default.

    *tokens* is accepted for API compatibility only (see the module docstring for why they are
    not used to restore).
    """
    del tokens
    session_env.clear_session_env()


def reset_session_vars() -> None:
    """Put every var back to never-set (env fallback active again), e.g. for a fresh task."""
    session_env.reset_session_env()


def declare_stateless_channel() -> None:
    """Say this channel cannot receive a result later (one-shot run, cron).

    """
    session_env.set_async_delivery(False)
