"""The approval session key: explicit binding first, then the session env, then the default."""
from __future__ import annotations

import contextvars

from gateway.session_context import clear_session_vars, set_session_vars
from tools.approval_context import get_current_session_key, reset_current_session_key, set_current_session_key


def test_default_when_nothing_is_bound():
    assert get_current_session_key() == "default"
    assert get_current_session_key(default="") == ""


def test_bound_key_wins_and_reset_restores_previous():
    outer = set_current_session_key("outer")
    inner = set_current_session_key("inner")
    assert get_current_session_key() == "inner"
    reset_current_session_key(inner)
    assert get_current_session_key() == "outer"
    reset_current_session_key(outer)
    assert get_current_session_key() == "default"


def test_none_binds_empty_so_session_env_is_consulted(monkeypatch):
    monkeypatch.setenv("HERMES_SESSION_KEY", "env-key")
    token = set_current_session_key(None)
    try:
        assert get_current_session_key() == "env-key"
    finally:
        reset_current_session_key(token)


def test_falls_back_to_session_var_before_environment(monkeypatch):
    monkeypatch.setenv("HERMES_SESSION_KEY", "env-key")
    tokens = set_session_vars(session_key="agent:main:telegram:dm:1")
    assert get_current_session_key(default="") == "agent:main:telegram:dm:1"
    clear_session_vars(tokens)
    # An explicitly cleared session var means "no session", not "use the process env".
    assert get_current_session_key(default="dflt") == ""


def test_binding_does_not_leak_out_of_its_context():
    contextvars.copy_context().run(set_current_session_key, "elsewhere")
    assert get_current_session_key() == "default"


def test_tui_turn_simulation_binds_both_helpers():
    approval_token = set_current_session_key("pre-compress-parent")
    tokens = set_session_vars(source="tui", session_key="pre-compress-parent", ui_session_id="origin-tab")
    try:
        assert get_current_session_key(default="") == "pre-compress-parent"
    finally:
        reset_current_session_key(approval_token)
        clear_session_vars(tokens)
    assert get_current_session_key(default="") == ""
