"""Where traces go: the exporters the standard ``OTEL_*`` variables ask for, sent in the
background, so a collector that is down or slow never holds a command up.

Invariants: spans are exported by the SDK's batch processor on its own thread, never on the
engine's (urgent spans at once: ``flush``); each OTLP request gives up after ``EXPORT_TIMEOUT_S``
(unless ``OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT`` says otherwise); at exit (and at SIGTERM/SIGHUP)
the process flushes traces and metrics side by side, waiting at most ``EXIT_WAIT_S`` while the
collector answers or may (not heard from yet, but listening), and ``EXIT_WAIT_DOWN_S`` once it
failed or nothing listens, then leaves the rest to daemon threads; an unreachable collector is said
once, in one warning line, and again only after it has answered in between (the OTLP exporter's
own retry warnings are silenced). A bad setting is logged, never fatal. With OTLP, the GenAI
token metrics (``genai_metrics``) are pushed to the same collector unless
``OTEL_METRICS_EXPORTER=none``.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

import offload.telemetry.flush as flush
from offload.telemetry.env import tracing_wanted

logger = logging.getLogger("offload.telemetry")

EXPORT_TIMEOUT_S = 2.0  # one OTLP request, retries included (the SDK's default is 10 s)
EXIT_WAIT_S = 2.0  # at exit, for the last batch, while the collector answers
EXIT_WAIT_DOWN_S = 0.3  # at exit, when it has not answered: a dead collector costs at most this
_OTLP_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.exporter.otlp.common.http",
                 "opentelemetry.exporter.otlp.proto.http.metric_exporter", "opentelemetry.sdk.metrics._internal.export")


class _OneWarning:
    """Wraps an exporter: says once that the collector does not answer, and tracks whether it does."""

    def __init__(self, exporter: Any, where: str) -> None:
        self.exporter, self.where = exporter, where
        self.answering: bool | None = None  # None: nothing sent yet

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.exporter.export(spans)
        except Exception as exc:  # an exporter bug must not kill the batch thread
            logger.debug("span export raised", exc_info=True)
            result, reason = SpanExportResult.FAILURE, str(exc)
        else:
            reason = "no answer"
        ok = result == SpanExportResult.SUCCESS
        if not ok and self.answering is not False:
            self.warn(reason)
        self.answering = ok
        return result

    def warn(self, reason: str) -> None:
        logger.warning("traces are not exported: the collector at %s does not answer (%s); spans are dropped "
                       "until it does", self.where, reason)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def _otlp(environ: Mapping[str, str]) -> _OneWarning:
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol != "http/protobuf":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported by offload's "
                         "exporter; use http/protobuf (the default)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    timed = environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or environ.get("OTEL_EXPORTER_OTLP_TIMEOUT")
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        f"{environ['OTEL_EXPORTER_OTLP_ENDPOINT'].rstrip('/')}/v1/traces" if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        else None)  # None: the exporter's default, http://localhost:4318/v1/traces
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=None if timed else EXPORT_TIMEOUT_S)
    for name in _OTLP_LOGGERS:  # its retry warnings: our one line says it
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return _OneWarning(exporter, getattr(exporter, "_endpoint", "the OTLP endpoint"))


def exporters(environ: Mapping[str, str]) -> list[Any]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (``otlp`` by default, ``console``)."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    names = [n.strip().lower() for n in (environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    found: list[Any] = []
    for name in names:
        if name == "console":
            found.append(ConsoleSpanExporter())
        elif name == "otlp":
            found.append(_otlp(environ))
        elif name != "none":
            raise ValueError(f"OTEL_TRACES_EXPORTER={name} is not supported; use otlp, console or none")
    return found


def _listening(where: str) -> bool:
    """Whether something accepts connections at the endpoint ``where`` (within the down wait): a
    collector not heard from yet may be slow, not dead, and is waited for as a live one."""
    parts = urlsplit(where)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname or "localhost", port), timeout=EXIT_WAIT_DOWN_S):
            return True
    except (OSError, ValueError):
        return False


def exit_wait_s(found: list[Any]) -> float:
    """How long the last flush may take: ``EXIT_WAIT_S`` unless an OTLP collector failed its
    last request, or was never heard from and nothing listens at its address."""
    down = any(isinstance(e, _OneWarning) and (e.answering is False or (e.answering is None and not _listening(e.where)))
               for e in found)
    return EXIT_WAIT_DOWN_S if down else EXIT_WAIT_S


@dataclass
class Exporting:
    """What ``install_from_env`` set up: the tracer provider and, with OTLP, the meter provider."""

    traces: Any
    metrics: Any = None
    exporters: list[Any] = field(default_factory=list)
    done: bool = False

    def force_flush(self) -> None:
        self.traces.force_flush()
        if self.metrics is not None:
            self.metrics.force_flush()

    def steps(self, final: bool) -> list[Any]:
        """Traces and metrics flushed (``final``: shut down) as separate steps, so a slow trace
        export never holds the metrics back."""
        timeout_ms = int(EXPORT_TIMEOUT_S * 1000)
        if final:
            found = [self.traces.shutdown, functools.partial(self.metrics.shutdown, timeout_millis=timeout_ms)
                     if self.metrics is not None else None]
        else:
            found = [self.traces.force_flush, functools.partial(self.metrics.force_flush, timeout_millis=timeout_ms)
                     if self.metrics is not None else None]
        return [step for step in found if step is not None]

    def shutdown(self) -> None:
        if self.done:
            return
        self.done = True  # once: a test's teardown and the exit hook may both ask
        for step in self.steps(final=True):
            step()


def _bounded(exporting: Exporting, final: bool, when: str) -> bool:
    """Traces and metrics flushed side by side on daemon threads, waiting at most the exit wait;
    True if done in time (else the collector is said to be down, once)."""
    if final:
        if exporting.done:
            return True
        exporting.done = True
    wait_s = exit_wait_s(exporting.exporters)
    if flush.in_parallel(exporting.steps(final), wait_s):
        return True
    for exporter in exporting.exporters:  # still retrying: say so once (unless said already) and leave
        if isinstance(exporter, _OneWarning) and exporter.answering is not False:
            exporter.answering = False
            exporter.warn(f"no answer within {wait_s:g} s {when}")
    return False


def shutdown_bounded(exporting: Exporting) -> bool:
    """At exit: flush and shut down, waiting at most the exit wait."""
    return _bounded(exporting, final=True, when="at exit")


def flush_at_signal(exporting: Exporting, name: str) -> bool:
    """At a termination signal: end the delivery spans in flight, then flush what has ended."""
    import offload.telemetry.tracing as tracing

    tracing.end_deliveries(name)
    return _bounded(exporting, final=False, when=f"at {name}")


def _meter_provider(environ: Mapping[str, str], resource: Any, found: list[Any]) -> Any:
    """A meter provider pushing the GenAI token metrics over OTLP next to the traces; None when
    traces do not go over OTLP or ``OTEL_METRICS_EXPORTER=none``."""
    if not any(isinstance(e, _OneWarning) for e in found) or environ.get("OTEL_METRICS_EXPORTER", "") == "none":
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    endpoint = environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or (
        f"{base.rstrip('/')}/v1/metrics" if base else None)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S))
    return MeterProvider(metric_readers=[reader], resource=resource, shutdown_on_exit=False)


def install_from_env(environ: Mapping[str, str] = os.environ) -> Exporting | None:
    """Turn tracing (and the GenAI token metrics) on if the environment asks for it.
    ``ImportError`` when the ``dashboard`` extra is missing (the caller says how to get it)."""
    if not tracing_wanted(environ):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from offload import __version__
        import offload.telemetry.genai_metrics as genai_metrics
        import offload.telemetry.tracing as tracing
        import offload.telemetry.unit_metrics as unit_metrics
        from offload.telemetry.spans import tracer_provider

        found = exporters(environ)
        resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "offload",
                                    "service.version": __version__})
        meters = _meter_provider(environ, resource, found)
    except ValueError as exc:
        logger.warning("tracing is off: %s", exc)
        return None
    provider = tracer_provider(resource=resource, shutdown_on_exit=False)
    for exporter in found:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    provider.add_span_processor(flush.FlushSoon(provider.force_flush))  # after the batches: they hold the span
    exporting = Exporting(provider, meters, found)
    atexit.register(shutdown_bounded, exporting)  # before install(): atexit is LIFO, open spans end first
    tracing.install(provider.get_tracer("offload"))
    if meters is not None:
        genai_metrics.install(meters)
        unit_metrics.install(meters)
    return exporting
