"""Telemetry for the engine: Prometheus counters (``metrics``) and OpenTelemetry traces
(``tracing``), both fed by the engine's observer seam (``offload.engine.observers``).

Both are optional (the ``dashboard`` extra installs their libraries) and off until
installed: the dashboard installs the metrics observer, ``export.install_from_env()``
installs tracing (and the GenAI token metrics) when the standard ``OTEL_*`` variables ask for it.
"""
from __future__ import annotations

import sys

from offload.errors import install_extra
from offload.telemetry.env import tracing_wanted

__all__ = ["install_tracing_from_env", "tracing_wanted"]


def install_tracing_from_env(flush_on_signals: bool = False) -> bool:
    """Turn tracing on if the OTEL_* variables ask for it. Costs an environment lookup when
    they do not: the OpenTelemetry SDK is imported only when tracing is wanted. Without the
    ``dashboard`` extra it says how to get it on stderr and runs untraced.
    ``flush_on_signals`` (a command's main thread): SIGTERM and SIGHUP flush what has ended first
    (``offload.telemetry.flush``)."""
    if not tracing_wanted():
        return False
    try:
        import functools

        from offload.telemetry import export, flush

        exporting = export.install_from_env()
        if exporting is not None and flush_on_signals:
            flush.on_termination(functools.partial(export.flush_at_signal, exporting))
        return exporting is not None
    except ImportError as exc:
        sys.stderr.write(f"offload: OTEL_* variables ask for traces, but {exc.name} is not installed "
                         f"({install_extra('dashboard')}); running without traces\n")
        return False
