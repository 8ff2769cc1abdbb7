"""GatewayRunner: formatting choice, routing enrichment, grouping and delivery via adapters."""
from __future__ import annotations

from typing import Any

import pytest

import tools.process_registry_notifications as prn
from gateway.run import (
    BATCH_PREFIX,
    DeliveryOutcome,
    GatewayRunner,
    _format_gateway_process_notification,
)


@pytest.fixture(autouse=True)
def no_delegation_config(monkeypatch):
    monkeypatch.setattr(prn, "_delegation_config", lambda: {})


def _evt(delegation_id="deleg_a", **over: Any) -> dict[str, Any]:
    evt = {
        "type": "async_delegation", "delegation_id": delegation_id,
        "session_key": "agent:main:telegram:dm:12345:678", "parent_session_id": "p1",
        "goal": f"goal of {delegation_id}", "status": "completed", "summary": f"result of {delegation_id}",
        "api_calls": 1, "duration_seconds": 1.0, "dispatched_at": 1000.0, "completed_at": 1001.0,
    }
    evt.update(over)
    return evt


class FakeAdapter:
    def __init__(self, accept: Any = True) -> None:
        self.accept = accept
        self.sent: list[tuple[str, str, str | None]] = []

    def send(self, chat_id: str, text: str, thread_id: str | None = None) -> Any:
        self.sent.append((chat_id, text, thread_id))
        if isinstance(self.accept, Exception):
            raise self.accept
        return self.accept


def _drain_of(*events, text=True):
    items = [(e, prn.format_process_notification(e) if text else None) for e in events]
    return lambda: items


# -- formatting --------------------------------------------------------------------------

def test_async_delegation_uses_the_shared_renderer_unchanged():
    evt = _evt(platform="telegram", chat_id="12345")
    assert _format_gateway_process_notification(evt) == prn.format_process_notification(evt)
    assert "ASYNC DELEGATION COMPLETE" in _format_gateway_process_notification(evt)


@pytest.mark.parametrize("evt", [{"type": "completion", "session_id": "p"}, {"type": "heartbeat"},
                                 {"type": "watch_match", "session_id": "p"}, {"type": "other"}, {}])
def test_events_other_than_delegations_belong_to_their_own_consumer(evt):
    assert _format_gateway_process_notification(evt) is None


# -- routing enrichment --------------------------------------------------------------------

def _bare_runner() -> GatewayRunner:
    return object.__new__(GatewayRunner)  # no __init__ state, as the acceptance suite does


def test_cli_origin_event_is_left_unrouted():
    evt = _evt(session_key="")
    _bare_runner()._enrich_async_delegation_routing(evt)
    assert "platform" not in evt and "chat_id" not in evt


def test_unparseable_key_is_left_unrouted():
    evt = _evt(session_key="20260703_parent_sid")
    _bare_runner()._enrich_async_delegation_routing(evt)
    assert "platform" not in evt


def test_dm_key_routes_with_thread():
    evt = _evt()
    _bare_runner()._enrich_async_delegation_routing(evt)
    assert (evt["platform"], evt["chat_type"], evt["chat_id"], evt["thread_id"]) == ("telegram", "dm", "12345", "678")


def test_group_key_routes_without_thread():
    evt = _evt(session_key="agent:main:telegram:group:-100:4")
    _bare_runner()._enrich_async_delegation_routing(evt)
    assert (evt["platform"], evt["chat_type"], evt["chat_id"]) == ("telegram", "group", "-100")
    assert "thread_id" not in evt


def test_preset_platform_is_untouched():
    evt = _evt(platform="slack", chat_id="C9")
    _bare_runner()._enrich_async_delegation_routing(evt)
    assert (evt["platform"], evt["chat_id"]) == ("slack", "C9")
    assert "chat_type" not in evt and "thread_id" not in evt


# -- delivery ------------------------------------------------------------------------------

def test_single_event_is_sent_to_its_chat_and_thread():
    adapter = FakeAdapter()
    evt = _evt()
    outcome = GatewayRunner({"telegram": adapter}).deliver_pending(_drain_of(evt))
    assert outcome == DeliveryOutcome(delivered=[evt], undelivered=[])
    assert outcome.delivered_count == 1
    assert adapter.sent == [("12345", prn.format_process_notification(evt), "678")]


def test_same_route_events_become_one_turn_with_batch_prefix():
    adapter = FakeAdapter()
    a, b = _evt("deleg_a"), _evt("deleg_b")
    outcome = GatewayRunner({"telegram": adapter}).deliver_pending(_drain_of(a, b))
    assert outcome.delivered == [a, b]
    ((chat_id, text, thread_id),) = adapter.sent
    assert text.startswith(BATCH_PREFIX.format(n=2) + "\n\n[ASYNC DELEGATION COMPLETE — deleg_a]")
    assert "[IMPORTANT: 2 background subagent delegations completed for this session." in text
    assert text.index("result of deleg_a") < text.index("result of deleg_b")


@pytest.mark.parametrize("field, value", [
    ("session_key", "agent:main:telegram:dm:999"), ("parent_session_id", "p2"),
    ("user_id", "u2"), ("session_key", "agent:main:telegram:dm:12345:679"),
])
def test_different_routes_are_separate_turns(field, value):
    adapter = FakeAdapter()
    a, b = _evt("deleg_a"), _evt("deleg_b", **{field: value})
    outcome = GatewayRunner({"telegram": adapter}).deliver_pending(_drain_of(a, b))
    assert outcome.delivered_count == 2
    assert len(adapter.sent) == 2
    assert all(not text.startswith("[IMPORTANT:") for _, text, _ in adapter.sent)


def test_interim_notices_are_not_merged_into_a_completion_batch():
    adapter = FakeAdapter()
    interim = _evt("deleg_a", task_failure_notice=True, is_batch=True, n_tasks=2,
                   results=[{"task_index": 0, "status": "failed", "error": "x"}])
    outcome = GatewayRunner({"telegram": adapter}).deliver_pending(_drain_of(interim, _evt("deleg_b")))
    assert outcome.delivered_count == 2
    assert [text.splitlines()[0] for _, text, _ in adapter.sent] == [
        "[ASYNC DELEGATION TASK FAILED — deleg_a, task 1/2]",
        "[ASYNC DELEGATION COMPLETE — deleg_b]",
    ]


def test_missing_text_is_rendered_by_the_gateway():
    adapter = FakeAdapter()
    GatewayRunner({"telegram": adapter}).deliver_pending(_drain_of(_evt(), text=False))
    assert adapter.sent[0][1].startswith("[ASYNC DELEGATION COMPLETE — deleg_a]")


@pytest.mark.parametrize("accept", [False, None, "yes", RuntimeError("platform down")])
def test_refused_or_failing_adapter_returns_the_whole_group(accept):
    adapter = FakeAdapter(accept)
    a, b = _evt("deleg_a"), _evt("deleg_b")
    outcome = GatewayRunner({"telegram": adapter}).deliver_pending(_drain_of(a, b))
    assert outcome.delivered == [] and outcome.undelivered == [a, b]


def test_unroutable_and_foreign_events_are_returned_not_sent():
    adapter = FakeAdapter()
    cli_origin = _evt("deleg_cli", session_key="")
    no_adapter = _evt("deleg_discord", session_key="agent:main:discord:dm:1")
    process_event = {"type": "completion", "session_id": "proc_1"}
    routed = _evt("deleg_ok")
    drain = lambda: [(cli_origin, "t"), (no_adapter, "t"), (process_event, "t"), (routed, "t")]
    outcome = GatewayRunner({"telegram": adapter}).deliver_pending(drain)
    assert outcome.delivered == [routed]
    assert outcome.undelivered == [cli_origin, process_event, no_adapter]
    assert [chat for chat, _, _ in adapter.sent] == ["12345"]


def test_one_failing_platform_does_not_block_another():
    telegram, slack = FakeAdapter(False), FakeAdapter(True)
    a = _evt("deleg_a")
    b = _evt("deleg_b", session_key="agent:main:slack:group:C1")
    outcome = GatewayRunner({"telegram": telegram, "slack": slack}).deliver_pending(_drain_of(a, b))
    assert (outcome.delivered, outcome.undelivered) == ([b], [a])
    assert slack.sent[0][2] is None  # group chats are never addressed by thread


def test_empty_drain_delivers_nothing():
    assert GatewayRunner({}).deliver_pending(lambda: []) == DeliveryOutcome()
