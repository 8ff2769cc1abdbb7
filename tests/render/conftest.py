"""Fixtures for renderer tests: a fixed time zone and a pinned delegation config."""
from __future__ import annotations

import os
import time
from typing import Any

import pytest

import tools.process_registry_notifications as prn


@pytest.fixture(autouse=True)
def utc_time_zone():
    """Render the Dispatched line in UTC so golden strings do not depend on the host zone."""
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if previous is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = previous
    time.tzset()


@pytest.fixture(autouse=True)
def delegation_config(monkeypatch) -> dict[str, Any]:
    """The config the model-rejection notice reads; empty unless a test fills it in."""
    config: dict[str, Any] = {}
    monkeypatch.setattr(prn, "_delegation_config", lambda: config)
    return config


def _make_evt(**over: Any) -> dict[str, Any]:
    evt: dict[str, Any] = {
        "type": "async_delegation", "delegation_id": "deleg_x1",
        "session_key": "agent:main:telegram:dm:12345:678",
        "goal": "Investigate flaky test", "context": "repo /tmp/p",
        "toolsets": ["terminal"], "role": "leaf", "model": "m",
        "status": "completed", "summary": "Found the bug in test_foo",
        "api_calls": 4, "duration_seconds": 12.0,
        "dispatched_at": 1000.0, "completed_at": 1012.0,
    }
    evt.update(over)
    return evt


def _make_batch(results: list[dict[str, Any]], **over: Any) -> dict[str, Any]:
    base = _make_evt(is_batch=True, goals=["task a", "task b"], results=results,
                    total_duration_seconds=30.5)
    for key in ("goal", "summary", "api_calls", "duration_seconds"):
        base.pop(key)
    base.update(over)
    return base


@pytest.fixture
def make_evt():
    """Factory for a single-task async_delegation event (the acceptance suite's shape)."""
    return _make_evt


@pytest.fixture
def make_batch():
    """Factory for a batch/unit event over ``goals=["task a", "task b"]``."""
    return _make_batch
