"""A delegation owner for the cross-process trace test: traces to a JSON-lines file, runs
one 2-child unit whose first child finishes (span exported, child recorded in the ledger)
and whose second never does, prints READY, and waits to be SIGKILLed.

Usage: python trace_owner.py SPANS_FILE   (HERMES_HOME from the environment)
"""
from __future__ import annotations

import json
import sys
import threading

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from offload import Offload
from offload.engine import observers
from offload.engine.units import batch_spec
from offload.origin import Origin
from offload.telemetry import tracing


class JsonLines(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps({"name": span.name, "trace_id": f"{span.context.trace_id:032x}",
                                      "span_id": f"{span.context.span_id:016x}",
                                      "parent_id": f"{span.parent.span_id:016x}" if span.parent else None}) + "\n")
        return SpanExportResult.SUCCESS


def main(spans_file: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(spans_file)))
    tracing.install(provider.get_tracer("owner"))
    off = Offload()  # never closed: the process is SIGKILLed
    dispatched, forever = threading.Event(), threading.Event()
    unit: dict[str, str] = {}

    def runner() -> dict:
        dispatched.wait()
        with observers.span("offload.subagent", task_index=0):
            pass
        off.engine.record_unit_child(unit["id"], {"task_index": 0, "status": "completed", "summary": "first result"})
        print("READY", unit["id"], flush=True)
        forever.wait()
        return {}

    spec = batch_spec(["first", "second"], model="m", origin=Origin.capture("sess-kill"))
    handle = off.engine.dispatch(spec, runner, 3)
    unit["id"] = handle["delegation_id"]
    dispatched.set()
    forever.wait()


if __name__ == "__main__":
    main(sys.argv[1])
