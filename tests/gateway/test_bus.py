"""The gateway consumer with durable claims, over the real engine and ledger."""
from __future__ import annotations

import pytest

from offload.gateway.bus import GatewayBus
from gateway.run import GatewayRunner
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from tools import async_delegation as ad
from tools.process_registry import CompletionBus

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


class Adapter:
    def __init__(self, accept: bool = True):
        self.accept, self.sent = accept, []

    def send(self, chat_id, text, thread_id=None):
        self.sent.append((chat_id, thread_id, text))
        return self.accept


def finished_event(session_key: str) -> tuple[dict, CompletionBus]:
    """A real finished delegation, its event on a fresh bus that has nothing to restore."""
    res = ad.dispatch_async_delegation(goal="look it up", context=None, toolsets=None, role="leaf", model="m",
                                       session_key=session_key,
                                       runner=lambda: {"status": "completed", "summary": "found it"})
    evt = wait_event(res["delegation_id"])
    registry = CompletionBus()
    registry._completions_restored = True
    registry.completion_queue.put(evt)
    return evt, registry


def test_accepted_result_is_claimed_and_acknowledged():
    evt, registry = finished_event("agent:main:telegram:dm:42:7")
    adapter = Adapter()
    assert GatewayBus(GatewayRunner({"telegram": adapter}), registry).tick() == 1
    ((chat_id, thread_id, text),) = adapter.sent
    assert (chat_id, thread_id) == ("42", "7") and "found it" in text
    assert ad.get_durable_delegation(evt["delegation_id"])["delivery_state"] == "delivered"
    assert registry.completion_queue.empty()


def test_refused_result_is_released_and_requeued_with_its_attempt_counted():
    evt, registry = finished_event("agent:main:telegram:dm:42")
    bus = GatewayBus(GatewayRunner({"telegram": Adapter(accept=False)}), registry)
    assert bus.tick() == 0
    row = ad.get_durable_delegation(evt["delegation_id"])
    assert (row["delivery_state"], row["delivery_attempts"]) == ("pending", 1)
    assert registry.completion_queue.get_nowait()["delegation_id"] == evt["delegation_id"]


def test_result_claimed_by_another_consumer_is_left_alone():
    evt, registry = finished_event("agent:main:slack:group:C1")
    assert ad.claim_event_delivery(evt, "cli") not in (None, "")
    adapter = Adapter()
    assert GatewayBus(GatewayRunner({"slack": adapter}), registry).tick() == 0
    assert adapter.sent == [] and registry.completion_queue.qsize() == 1


def test_cli_origin_results_are_not_the_gateways():
    evt, registry = finished_event("")
    assert GatewayBus(GatewayRunner({"telegram": Adapter()}), registry).tick() == 0
    assert ad.get_durable_delegation(evt["delegation_id"])["delivery_attempts"] == 0
    assert registry.completion_queue.qsize() == 1
