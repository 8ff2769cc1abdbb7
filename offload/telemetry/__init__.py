"""Telemetry for the engine: Prometheus counters (``metrics``) and OpenTelemetry traces
(``tracing``), both fed by the engine's observer seam (``offload.engine.observers``).

Both are optional (the ``dashboard`` extra installs their libraries) and off until
installed: the dashboard installs the metrics observer, ``export.install_from_env()``
installs tracing (and the GenAI token metrics) when the standard ``OTEL_*`` variables ask for it.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping

from offload.errors import install_extra


def tracing_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OTEL_* variables ask for traces (read without importing OpenTelemetry)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def install_tracing_from_env() -> bool:
    """Turn tracing on if the OTEL_* variables ask for it. Costs an environment lookup when
    they do not: the OpenTelemetry SDK is imported only when tracing is wanted. Without the
    ``dashboard`` extra it says how to get it on stderr and runs untraced."""
    if not tracing_wanted():
        return False
    try:
        from offload.telemetry import export

        return export.install_from_env() is not None
    except ImportError as exc:
        sys.stderr.write(f"offload: OTEL_* variables ask for traces, but {exc.name} is not installed "
                         f"({install_extra('dashboard')}); running without traces\n")
        return False
