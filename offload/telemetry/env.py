"""What the standard ``OTEL_*`` variables ask of offload, read without importing OpenTelemetry
(so a process that exports nothing never loads it). Imports nothing of ``offload.telemetry``:
every module of the package may read it."""
from __future__ import annotations

import os
from typing import Mapping


def tracing_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OTEL_* variables ask for traces (read without importing OpenTelemetry)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
