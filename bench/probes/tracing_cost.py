"""What telemetry costs per delegation: case 1's offload run (N trivial delegations,
dispatched and awaited) with telemetry off, with the dashboard's metrics observer, and with
tracing on (the SDK's batch processor and an exporter that discards, so the figure is
offload's and the SDK's work, not a collector's network). Modes alternate within each round.

    python -m bench.probes.tracing_cost [--n 2000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench.cases.cost import run_offload
from offload.engine import observers
from offload.telemetry import metrics, tracing

MODES = ("off", "metrics", "tracing")


class _Discard(SpanExporter):
    def export(self, spans) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _run(mode: str, n: int, root: Path) -> tuple[float, float]:
    provider = None
    remove = None
    root.mkdir(parents=True, exist_ok=True)
    if mode == "metrics":
        remove = observers.add_observer(metrics.observe)
    elif mode == "tracing":
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(_Discard()))
        tracing.install(provider.get_tracer("bench"))
    try:
        run = run_offload(n, root)
        if provider is not None:
            provider.force_flush()
    finally:
        if remove is not None:
            remove()
        tracing.uninstall()
        if provider is not None:
            provider.shutdown()
    return run.total_s / n * 1e6, run.cpu_s / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            order = MODES[round_no % 3:] + MODES[:round_no % 3]
            for mode in order:
                figures[mode].append(_run(mode, args.n, Path(tmp) / f"{mode}-{round_no}"))
    off_wall = statistics.median(w for w, _ in figures["off"])
    off_cpu = statistics.median(c for _, c in figures["off"])
    print(f"{args.n} delegations x {args.rounds} rounds, load average {os.getloadavg()[0]:.2f}")
    for mode in MODES:
        wall = statistics.median(w for w, _ in figures[mode])
        cpu = statistics.median(c for _, c in figures[mode])
        print(f"{mode:8s} wall {wall:7.1f} us/delegation ({wall / off_wall:.2f}x off, {wall - off_wall:+.1f} us)  "
              f"cpu {cpu:7.1f} us ({cpu - off_cpu:+.1f} us)")


if __name__ == "__main__":
    main()
