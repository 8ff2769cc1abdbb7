"""Where traces go: the exporters the standard ``OTEL_*`` variables ask for, sent in the
background, so a collector that is down or slow never holds a command up.

Invariants: spans are exported by the SDK's batch processor on its own thread, never on the
engine's; each OTLP request gives up after ``EXPORT_TIMEOUT_S`` (unless
``OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT`` says otherwise); at exit the process waits for the last
batch at most ``EXIT_WAIT_S`` while the collector answers and ``EXIT_WAIT_DOWN_S`` once it has
not (or never has), then leaves the rest to the daemon thread; an unreachable collector is said
once, in one warning line, and again only after it has answered in between (the OTLP exporter's
own retry warnings are silenced). A bad setting is logged, never fatal.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any, Mapping, Sequence

from offload.telemetry import tracing_wanted

logger = logging.getLogger("offload.telemetry")

EXPORT_TIMEOUT_S = 2.0  # one OTLP request, retries included (the SDK's default is 10 s)
EXIT_WAIT_S = 2.0  # at exit, for the last batch, while the collector answers
EXIT_WAIT_DOWN_S = 0.3  # at exit, when it has not answered: a dead collector costs at most this
_OTLP_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.exporter.otlp.common.http")


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


def _exit_wait_s(found: list[Any]) -> float:
    down = any(isinstance(e, _OneWarning) and not e.answering for e in found)
    return EXIT_WAIT_DOWN_S if down else EXIT_WAIT_S


def shutdown_bounded(provider: Any, found: list[Any]) -> bool:
    """Flush and shut ``provider`` down on a daemon thread, waiting at most the exit wait;
    True if it finished in time."""
    wait_s = _exit_wait_s(found)
    done = threading.Thread(target=provider.shutdown, name="offload-trace-flush", daemon=True)
    done.start()
    done.join(wait_s)
    if done.is_alive():  # still retrying: say so once (unless said already) and leave
        for exporter in found:
            if isinstance(exporter, _OneWarning) and exporter.answering is not False:
                exporter.answering = False
                exporter.warn(f"no answer within {wait_s:g} s at exit")
    return not done.is_alive()


def install_from_env(environ: Mapping[str, str] = os.environ) -> Any:
    """Turn tracing on if the environment asks for it: the installed ``TracerProvider``, or None."""
    if not tracing_wanted(environ):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from offload.telemetry import tracing
        from offload.telemetry.spans import tracer_provider

        found = exporters(environ)
    except ImportError as exc:
        logger.warning("tracing asked for by OTEL_* but %s is missing: pip install 'offload[dashboard]'", exc.name)
        return None
    except ValueError as exc:
        logger.warning("tracing is off: %s", exc)
        return None
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "offload"})
    provider = tracer_provider(resource=resource, shutdown_on_exit=False)
    for exporter in found:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    atexit.register(shutdown_bounded, provider, found)  # before install(): atexit is LIFO, open spans end first
    tracing.install(provider.get_tracer("offload"))
    return provider
