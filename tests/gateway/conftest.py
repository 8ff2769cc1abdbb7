"""Gateway test fixtures: every test starts with no session bound and no session env vars."""
from __future__ import annotations

import pytest

import gateway.session_context as session_context
from offload.context.session_env import ASYNC_DELIVERY_NAME, SESSION_ENV_NAMES


@pytest.fixture(autouse=True)
def fresh_session_context(monkeypatch):
    for name in (*SESSION_ENV_NAMES, ASYNC_DELIVERY_NAME):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(session_context, "_session_context_engaged", False)
    # ContextVars set by a test body persist in pytest's thread context; forget them both ways.
    session_context.reset_session_vars()
    yield
    session_context.reset_session_vars()
