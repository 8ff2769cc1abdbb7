"""A loopback OTLP/HTTP receiver for tests: a real HTTP server on 127.0.0.1 that decodes each
``POST /v1/traces`` (protobuf ``ExportTraceServiceRequest``) into plain ``Span`` values, and each
``POST /v1/metrics`` into the histogram and counter ``Point`` values, as a collector would see them.

``OtlpReceiver().start()``; point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``receiver.url``;
``receiver.wait_for(predicate)`` blocks until the spans received satisfy it (or fails with what
arrived). ``Tree`` answers the questions a test asks of one trace.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                      ExportTraceServiceResponse)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (ExportMetricsServiceRequest,
                                                                          ExportMetricsServiceResponse)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan, Status as ProtoStatus

KINDS = {ProtoSpan.SPAN_KIND_INTERNAL: "internal", ProtoSpan.SPAN_KIND_CLIENT: "client",
         ProtoSpan.SPAN_KIND_SERVER: "server", ProtoSpan.SPAN_KIND_PRODUCER: "producer",
         ProtoSpan.SPAN_KIND_CONSUMER: "consumer", ProtoSpan.SPAN_KIND_UNSPECIFIED: "unspecified"}
STATUSES = {ProtoStatus.STATUS_CODE_UNSET: "unset", ProtoStatus.STATUS_CODE_OK: "ok",
            ProtoStatus.STATUS_CODE_ERROR: "error"}


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    status: str
    status_message: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str]]  # (trace_id, span_id)
    service: str = ""
    resource: dict[str, Any] = field(default_factory=dict)  # the exporting process's resource attributes

    @property
    def event_names(self) -> list[str]:
        return [name for name, _ in self.events]


def _decode(span: Any, resource: dict[str, Any]) -> Span:
    service = resource.get("service.name", "")
    return Span(name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex() or None, kind=KINDS[span.kind],
                status=STATUSES[span.status.code], status_message=span.status.message,
                start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                attributes={a.key: _value(a.value) for a in span.attributes},
                events=[(e.name, {a.key: _value(a.value) for a in e.attributes}) for e in span.events],
                links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links], service=service,
                resource=resource)


@dataclass
class Point:
    """One histogram data point of a metric: its attributes, count and sum."""

    metric: str
    attributes: dict[str, Any]
    count: int
    total: float


@dataclass
class OtlpReceiver:
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    requests: int = 0
    delay_s: float = 0.0  # how long each request waits for its answer (a slow collector)

    def __post_init__(self) -> None:
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)  # the collector's slowness is what a test looks at
                if self.path == "/v1/traces":
                    receiver._add(ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    receiver._add_metrics(ExportMetricsServiceRequest.FromString(body))
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    reply = b""
                self.send_response(200 if self.path in ("/v1/traces", "/v1/metrics") else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self, **extra: str) -> dict[str, str]:
        """The variables that send a process's traces here (and nothing else)."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url, "OTEL_TRACES_EXPORTER": "otlp", **extra}

    def start(self) -> "OtlpReceiver":
        threading.Thread(target=self._server.serve_forever, daemon=True, name="otlp-receiver").start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _add(self, request: Any) -> None:
        decoded = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                decoded += [_decode(span, resource) for span in scope_spans.spans]
        with self._changed:
            self.requests += 1
            self.spans.extend(decoded)
            self._changed.notify_all()

    def _add_metrics(self, request: Any) -> None:
        decoded = []
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.histogram.data_points:
                        decoded.append(Point(metric.name, {a.key: _value(a.value) for a in point.attributes},
                                             point.count, point.sum))
                    for point in metric.sum.data_points:  # a counter: its value is its count
                        value = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
                        decoded.append(Point(metric.name, {a.key: _value(a.value) for a in point.attributes},
                                             int(value), value))
        with self._changed:
            self.points.extend(decoded)
            self._changed.notify_all()

    def wait_for_points(self, done: Callable[[list[Point]], bool], timeout_s: float = 30.0) -> list[Point]:
        with self._changed:
            if not self._changed.wait_for(lambda: done(list(self.points)), timeout_s):
                raise AssertionError(f"metrics never arrived; got {self.points}")
            return list(self.points)

    def wait_for(self, done: Callable[[list[Span]], bool], timeout_s: float = 30.0) -> list[Span]:
        with self._changed:
            if not self._changed.wait_for(lambda: done(list(self.spans)), timeout_s):
                raise AssertionError(f"spans never arrived; got {[(s.name, s.parent_id) for s in self.spans]}")
            return list(self.spans)

    def metric_names(self) -> set[str]:
        with self._changed:
            return {p.metric for p in self.points}

    def named(self, name: str) -> list[Span]:
        with self._changed:
            return [s for s in self.spans if s.name == name]


class Tree:
    """The spans of one trace: ``children(span)``, ``one(name)``, ``root``."""

    def __init__(self, spans: list[Span], trace_id: str) -> None:
        self.spans = [s for s in spans if s.trace_id == trace_id]
        self.by_id = {s.span_id: s for s in self.spans}

    def one(self, name: str) -> Span:
        found = [s for s in self.spans if s.name == name]
        assert len(found) == 1, f"{len(found)} spans named {name}: {[s.name for s in self.spans]}"
        return found[0]

    def all(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def children(self, span: Span, name: str | None = None) -> list[Span]:
        return [s for s in self.spans if s.parent_id == span.span_id and (name is None or s.name == name)]

    def units_under(self, call: Span) -> list[Span]:
        """The unit spans a tool call dispatched (each under its ``offload.delegation.dispatch``)."""
        return [u for d in self.children(call, "offload.delegation.dispatch") for u in self.children(d, "offload.delegation")]

    @property
    def orphans(self) -> list[Span]:
        """Spans whose parent is not in the trace (a root has no parent and is not one)."""
        return [s for s in self.spans if s.parent_id and s.parent_id not in self.by_id]
