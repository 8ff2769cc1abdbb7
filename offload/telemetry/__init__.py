"""Telemetry for the engine: Prometheus counters (``metrics``) and OpenTelemetry traces
(``tracing``), both fed by the engine's observer seam (``delegation.observers``).

Both are optional (the ``dashboard`` extra installs their libraries) and off until
installed: the dashboard installs the metrics observer, ``tracing.install_from_env()``
installs tracing when the standard ``OTEL_*`` variables ask for it.
"""
