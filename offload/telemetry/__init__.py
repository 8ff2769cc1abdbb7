"""Telemetry for the engine: Prometheus counters (``metrics``) and OpenTelemetry traces
(``tracing``), both fed by the engine's observer seam (``delegation.observers``).

Both are optional (the ``dashboard`` extra installs their libraries) and off until
installed: the dashboard installs the metrics observer, ``tracing.install_from_env()``
installs tracing when the standard ``OTEL_*`` variables ask for it.
"""


def install_tracing_from_env() -> bool:
    """Turn tracing on if the OTEL_* variables ask for it. Costs an environment lookup when
    they do not: the OpenTelemetry SDK is imported only when tracing is wanted."""
    import os

    if not any(key.startswith("OTEL_") for key in os.environ):
        return False
    from offload.telemetry import tracing

    return tracing.install_from_env()
