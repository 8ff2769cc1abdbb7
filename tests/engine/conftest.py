"""Helpers of the engine tests, shared by the other suites: wait for one unit's event on a bus
and drain a bus; and ``clean_engine``, a clean default runtime of the compat adapter and an
empty bus around a test that still drives offload through the hermes names (the engine tests
themselves run on their own ``runtime``)."""
from __future__ import annotations

import queue

import pytest

from offload.engine.events import is_interim
from tools import async_delegation as ad
from tools.process_registry import process_registry


def drain_queue(bus=process_registry) -> list[dict]:
    events = []
    while True:
        try:
            events.append(bus.completion_queue.get_nowait())
        except queue.Empty:
            return events


def wait_event(delegation_id: str, timeout_s: float = 10.0, interim: bool = False, bus=process_registry) -> dict:
    """The final completion event of ``delegation_id`` on ``bus`` (default: the compat
    adapter's; ``interim``: its interim failure notice instead); every other event is put back."""
    skipped = []
    try:
        while True:
            evt = bus.completion_queue.get(timeout=timeout_s)
            if evt.get("delegation_id") == delegation_id and is_interim(evt) == interim:
                return evt
            skipped.append(evt)
    finally:
        for evt in skipped:
            bus.completion_queue.put(evt)


@pytest.fixture
def clean_engine():
    ad._reset_for_tests()
    drain_queue()
    yield
    ad._reset_for_tests()
    drain_queue()
