"""Token and duration metrics of model calls, in the OpenTelemetry GenAI conventions
(``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``), pushed over OTLP with
the traces by every process that makes model calls (``run``, ``chat``, ``worker``, the gateway).

Off until ``install`` is given a ``MeterProvider`` (``offload.telemetry.export`` does when the
``OTEL_*`` variables ask for OTLP and ``OTEL_METRICS_EXPORTER`` is not ``none``); then
``record`` costs two histogram updates per model call. The provider is this module's own, never
OpenTelemetry's global one, so installing twice in a process (tests) is fine.
"""
from __future__ import annotations

from typing import Any

_instruments: tuple[Any, Any] | None = None
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
_DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


def install(provider: Any) -> None:
    global _instruments
    meter = provider.get_meter("offload")
    tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                    description="Tokens used per model call, by gen_ai.token.type (input, output)",
                                    explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS)
    duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s",
                                      description="Duration of a model call",
                                      explicit_bucket_boundaries_advisory=_DURATION_BUCKETS_S)
    _instruments = (tokens, duration)


def uninstall() -> None:
    global _instruments
    _instruments = None


CALL_ATTRIBUTES = ("gen_ai.operation.name", "gen_ai.request.model", "gen_ai.provider.name", "server.address",
                   "server.port")  # of the call's span, as the conventions list them for the metrics


def record(call: dict[str, Any], duration_s: float, outcome: dict[str, Any]) -> None:
    """One model call that ended: its duration, with ``error.type`` when it failed, and the
    tokens the server reported (those it did not are left out). ``call``: the span's attributes
    of ``CALL_ATTRIBUTES``; ``outcome``: ``gen_ai.usage.*``, ``gen_ai.response.model``, ``error.type``."""
    instruments = _instruments
    if instruments is None:
        return
    tokens, duration = instruments
    attributes = {"gen_ai.operation.name": "chat", **call}
    for key in ("gen_ai.response.model", "error.type"):
        if outcome.get(key):
            attributes[key] = outcome[key]
    duration.record(max(0.0, duration_s), attributes)
    for kind in ("input", "output"):
        count = outcome.get(f"gen_ai.usage.{kind}_tokens")
        if isinstance(count, int) and not isinstance(count, bool):
            tokens.record(count, {**attributes, "gen_ai.token.type": kind})
