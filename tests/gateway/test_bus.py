"""The gateway consumer with durable claims, over a real runtime (engine and ledger)."""
from __future__ import annotations

import pytest

from offload.engine.bus import CompletionBus
from offload.engine.units import UnitSpec
from offload.origin import Origin
from offload.gateway.bus import GatewayBus
from offload.gateway.runner import GatewayRunner
from tests.engine.conftest import wait_event

pytestmark = [pytest.mark.timeout(30)]


class Adapter:
    def __init__(self, accept: bool = True):
        self.accept, self.sent = accept, []

    def send(self, chat_id, text, thread_id=None):
        self.sent.append((chat_id, thread_id, text))
        return self.accept


def finished_event(off, session_key: str) -> tuple[dict, CompletionBus]:
    """A real finished delegation, its event on a fresh bus that has nothing to restore."""
    res = off.engine.dispatch(UnitSpec("look it up", role="leaf", model="m", origin=Origin.capture(session_key)),
                              lambda: {"status": "completed", "summary": "found it"}, 3)
    evt = wait_event(res["delegation_id"], bus=off.bus)
    registry = CompletionBus(render=off.render)
    registry.completion_queue.put(evt)
    return evt, registry


def test_accepted_result_is_claimed_and_acknowledged(runtime):
    evt, registry = finished_event(runtime, "agent:main:telegram:dm:42:7")
    adapter = Adapter()
    assert GatewayBus(GatewayRunner({"telegram": adapter}), registry, runtime.deliveries).tick() == 1
    ((chat_id, thread_id, text),) = adapter.sent
    assert (chat_id, thread_id) == ("42", "7") and "found it" in text
    assert runtime.deliveries.get(evt["delegation_id"])["delivery_state"] == "delivered"
    assert registry.completion_queue.empty()


def test_refused_result_is_released_and_requeued_with_its_attempt_counted(runtime):
    evt, registry = finished_event(runtime, "agent:main:telegram:dm:42")
    bus = GatewayBus(GatewayRunner({"telegram": Adapter(accept=False)}), registry, runtime.deliveries)
    assert bus.tick() == 0
    row = runtime.deliveries.get(evt["delegation_id"])
    assert (row["delivery_state"], row["delivery_attempts"]) == ("pending", 1)
    assert registry.completion_queue.get_nowait()["delegation_id"] == evt["delegation_id"]


def test_result_claimed_by_another_consumer_is_left_alone(runtime):
    evt, registry = finished_event(runtime, "agent:main:slack:group:C1")
    assert runtime.deliveries.claim_event(evt, "cli") not in (None, "")
    adapter = Adapter()
    assert GatewayBus(GatewayRunner({"slack": adapter}), registry, runtime.deliveries).tick() == 0
    assert adapter.sent == [] and registry.completion_queue.qsize() == 1


def test_cli_origin_results_are_not_the_gateways(runtime):
    evt, registry = finished_event(runtime, "")
    assert GatewayBus(GatewayRunner({"telegram": Adapter()}), registry, runtime.deliveries).tick() == 0
    assert runtime.deliveries.get(evt["delegation_id"])["delivery_attempts"] == 0
    assert registry.completion_queue.qsize() == 1
