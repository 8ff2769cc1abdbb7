"""Telemetry tests: a loopback OTLP/HTTP receiver (``receiver.py``) and tracing installed in
this process from the same ``OTEL_*`` variables a user sets, exporting to it."""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from offload.telemetry import export, tracing
from tests.telemetry.receiver import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    started = OtlpReceiver().start()
    yield started
    started.stop()


@pytest.fixture
def traced(receiver, monkeypatch) -> Iterator[Any]:
    """Tracing on in this process, exporting to ``receiver``; ``traced.force_flush()`` sends
    what has ended."""
    for name, value in receiver.env(OTEL_SERVICE_NAME="offload-test").items():
        monkeypatch.setenv(name, value)
    provider = export.install_from_env()
    assert provider is not None
    yield provider
    tracing.uninstall()
    provider.shutdown()
