"""Engine tests: a clean engine and an empty completion queue around every test."""
from __future__ import annotations

import queue

import pytest

from offload.engine.events import is_interim
from tools import async_delegation as ad
from tools.process_registry import process_registry


def drain_queue() -> list[dict]:
    events = []
    while True:
        try:
            events.append(process_registry.completion_queue.get_nowait())
        except queue.Empty:
            return events


def wait_event(delegation_id: str, timeout_s: float = 10.0, interim: bool = False) -> dict:
    """The final completion event of ``delegation_id`` (``interim``: its interim failure notice
    instead); every other event is put back."""
    skipped = []
    try:
        while True:
            evt = process_registry.completion_queue.get(timeout=timeout_s)
            if evt.get("delegation_id") == delegation_id and is_interim(evt) == interim:
                return evt
            skipped.append(evt)
    finally:
        for evt in skipped:
            process_registry.completion_queue.put(evt)


@pytest.fixture(autouse=True)
def clean_engine():
    ad._reset_for_tests()
    drain_queue()
    yield
    ad._reset_for_tests()
    drain_queue()
