"""Session ContextVars: binding, clearing, env fallback, isolation and async delivery."""
from __future__ import annotations

import contextvars
import threading

import pytest

from gateway.session_context import (
    async_delivery_supported,
    clear_session_vars,
    declare_stateless_channel,
    get_session_env,
    reset_session_vars,
    session_context_engaged,
    set_session_vars,
)

PARAM_TO_ENV = {
    "platform": "HERMES_SESSION_PLATFORM",
    "source": "HERMES_SESSION_SOURCE",
    "chat_id": "HERMES_SESSION_CHAT_ID",
    "chat_type": "HERMES_SESSION_CHAT_TYPE",
    "chat_name": "HERMES_SESSION_CHAT_NAME",
    "thread_id": "HERMES_SESSION_THREAD_ID",
    "user_id": "HERMES_SESSION_USER_ID",
    "user_name": "HERMES_SESSION_USER_NAME",
    "scope_id": "HERMES_SESSION_SCOPE_ID",
    "session_key": "HERMES_SESSION_KEY",
    "session_id": "HERMES_SESSION_ID",
    "ui_session_id": "HERMES_UI_SESSION_ID",
}


@pytest.mark.parametrize("param, env_name", PARAM_TO_ENV.items())
def test_each_parameter_binds_its_env_named_var_and_blanks_the_rest(param, env_name, monkeypatch):
    for other in PARAM_TO_ENV.values():
        monkeypatch.setenv(other, "from-env")
    set_session_vars(**{param: "bound"})
    assert get_session_env(env_name) == "bound"
    # Every other var is bound to "" at once, so the process env cannot fill the gaps.
    assert {get_session_env(n) for n in PARAM_TO_ENV.values() if n != env_name} == {""}


def test_unset_var_falls_back_to_environment_then_default(monkeypatch):
    assert get_session_env("HERMES_SESSION_KEY", "dflt") == "dflt"
    monkeypatch.setenv("HERMES_SESSION_KEY", "env-key")
    assert get_session_env("HERMES_SESSION_KEY", "dflt") == "env-key"


def test_names_without_a_var_read_the_environment(monkeypatch):
    monkeypatch.setenv("HERMES_SOMETHING_ELSE", "x")
    set_session_vars(session_key="k")
    assert get_session_env("HERMES_SOMETHING_ELSE") == "x"
    assert get_session_env("HERMES_NOT_SET_ANYWHERE", "d") == "d"


def test_clear_blocks_env_fallback_and_reset_restores_it(monkeypatch):
    monkeypatch.setenv("HERMES_SESSION_KEY", "env-key")
    tokens = set_session_vars(session_key="agent:main:telegram:dm:1")
    assert get_session_env("HERMES_SESSION_KEY") == "agent:main:telegram:dm:1"
    clear_session_vars(tokens)
    assert get_session_env("HERMES_SESSION_KEY", "dflt") == ""
    reset_session_vars()
    assert get_session_env("HERMES_SESSION_KEY", "dflt") == "env-key"


def test_clear_works_from_a_different_context_than_the_set():
    """Tokens cannot be reset across Contexts; clearing must not depend on them."""
    tokens = contextvars.copy_context().run(set_session_vars, session_key="k")
    set_session_vars(session_key="mine")
    clear_session_vars(tokens)
    assert get_session_env("HERMES_SESSION_KEY", "d") == ""


def test_binding_is_task_local():
    set_session_vars(session_key="outer")
    seen = {}

    def other_task():
        set_session_vars(session_key="inner")
        seen["inner"] = get_session_env("HERMES_SESSION_KEY")

    contextvars.copy_context().run(other_task)
    worker = threading.Thread(target=lambda: seen.setdefault("thread", get_session_env("HERMES_SESSION_KEY", "none")))
    worker.start()
    worker.join(timeout=5)
    assert seen == {"inner": "inner", "thread": "none"}
    assert get_session_env("HERMES_SESSION_KEY") == "outer"


def test_set_returns_one_token_per_var_plus_async_flag():
    assert len(set_session_vars()) == len(PARAM_TO_ENV) + 1


def test_async_delivery_defaults_to_supported_and_follows_binding():
    assert async_delivery_supported() is True
    set_session_vars(async_delivery=False)
    assert async_delivery_supported() is False
    clear_session_vars([])
    assert async_delivery_supported() is True
    set_session_vars(async_delivery=True)
    assert async_delivery_supported() is True


def test_stateless_channel_disables_async_delivery_without_engaging():
    declare_stateless_channel()
    assert async_delivery_supported() is False
    assert session_context_engaged() is False
    reset_session_vars()
    assert async_delivery_supported() is True


def test_set_session_vars_latches_engagement():
    assert session_context_engaged() is False
    clear_session_vars(set_session_vars(source="tui"))
    assert session_context_engaged() is True


def test_values_are_strings_and_none_becomes_empty():
    set_session_vars(chat_id=None, thread_id=678)  # type: ignore[arg-type]
    assert get_session_env("HERMES_SESSION_CHAT_ID", "d") == ""
    assert get_session_env("HERMES_SESSION_THREAD_ID") == "678"


def test_unknown_names_are_rejected_by_the_primitive_writer():
    from offload.context.session_env import bind_session_env

    with pytest.raises(KeyError, match="HERMES_SESSION_BOGUS"):
        bind_session_env({"HERMES_SESSION_BOGUS": "x"}, async_delivery=True)
