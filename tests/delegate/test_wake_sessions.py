"""#14 item 5 (unit level): stateless channels that can be woken later at a raw session id."""
from __future__ import annotations

import json

import pytest

import tools.delegate_tool as dt
from tests.delegate.fakes import FakeChild, FakeParent
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from offload.context import session_env

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


@pytest.fixture
def stateless_request():
    """A turn on a stateless channel (an API request) that can be woken at 'api-sess-7'."""
    tokens = [session_env.set_async_delivery(False), session_env.set_wake_session("api-sess-7")]
    yield
    session_env.reset_wake_session(tokens[1])
    session_env._ASYNC_DELIVERY.reset(tokens[0])


def test_a_wakeable_stateless_request_dispatches_in_the_background(stateless_request):
    handle = json.loads(dt.delegate_task(goal="count the files", parent_agent=FakeParent()))
    assert handle["status"] == "dispatched" and handle["mode"] == "background"
    evt = wait_event(handle["delegation_id"])
    assert evt["origin_session_id"] == "api-sess-7" and evt["results"][0]["status"] == "completed"


def test_only_a_channel_that_cannot_be_reached_later_runs_inline():
    token = session_env.set_async_delivery(False)  # stateless, and no session to wake
    try:
        out = json.loads(dt.delegate_task(goal="count the files", parent_agent=FakeParent()))
    finally:
        session_env._ASYNC_DELIVERY.reset(token)
    assert out["mode"] == "sync" and "not available" in out["note"]


def test_a_push_channel_records_no_wake_id():
    handle = json.loads(dt.delegate_task(goal="count the files", parent_agent=FakeParent()))
    assert wait_event(handle["delegation_id"])["origin_session_id"] == ""


def test_building_a_child_cannot_overwrite_the_captured_origin(stateless_request):
    class Rebinding(FakeParent):
        def build_child(self, **kw) -> FakeChild:  # as an agent constructor rebinding session state would
            session_env.set_wake_session("someone-else")
            session_env.bind_session_env({"HERMES_SESSION_KEY": "other-key"}, async_delivery=True)
            return super().build_child(**kw)

    handle = json.loads(dt.delegate_task(tasks=[{"goal": "count the files"}, {"goal": "list the dirs"}],
                                         parent_agent=Rebinding()))
    evt = wait_event(handle["delegation_id"])
    assert (evt["origin_session_id"], evt["session_key"]) == ("api-sess-7", "parent-sid")
    assert session_env.wake_session_id() == "api-sess-7"  # the caller's own binding is untouched


def test_the_woken_session_owns_results_recorded_for_its_raw_id(runtime):
    from offload.session.inbox import SessionInbox

    with runtime.session_store() as store:
        inbox = SessionInbox("api-sess-7", store, runtime)
        assert inbox.owns({"type": "async_delegation", "session_key": "", "origin_session_id": "api-sess-7"})
        assert not inbox.owns({"type": "async_delegation", "session_key": "", "origin_session_id": "api-sess-8"})


def test_clearing_or_resetting_the_session_forgets_the_wake_id():
    import contextvars

    def check():  # in a copy of the context, so nothing leaks into other tests
        session_env.set_wake_session("api-sess-9")
        session_env.clear_session_env()
        assert session_env.wake_session_id() == ""
        session_env.set_wake_session("api-sess-9")
        session_env.reset_session_env()
        assert session_env.wake_session_id() == ""
    contextvars.copy_context().run(check)
