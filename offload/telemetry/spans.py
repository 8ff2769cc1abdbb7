"""The pieces of a span offload needs beyond the SDK: the span factory behind
``offload.engine.observers.span`` (with the GenAI conventions for model calls), W3C carriers,
and span ids a process can choose, so a process that recovers a dead owner's unit emits the
unit span under the very id the owner's exported child spans name as their parent.

Invariant: ids are forced only for the one ``start_span`` call inside ``forced_ids``, on this
thread; every other span gets the SDK's random ids.
"""
from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import offload.telemetry.genai_metrics as genai_metrics

PROPAGATOR = TraceContextTextMapPropagator()
# Attributes that hold what a person or a model wrote (a subagent's task): exported only when the
# GenAI conventions' opt-in for content says so, as message content would be.
CONTENT_KEYS = frozenset({"goal"})
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def content_wanted(environ: Mapping[str, str]) -> bool:
    return environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"
_CONVENTION_NAMESPACES = ("gen_ai.", "server.")


class ForcedIds(RandomIdGenerator):
    """Random ids, except the ones ``forced_ids`` asks for (once each, on its thread)."""

    def __init__(self) -> None:
        self.wanted = threading.local()

    def generate_trace_id(self) -> int:
        forced = getattr(self.wanted, "trace_id", None)
        self.wanted.trace_id = None
        return forced or super().generate_trace_id()

    def generate_span_id(self) -> int:
        forced = getattr(self.wanted, "span_id", None)
        self.wanted.span_id = None
        return forced or super().generate_span_id()


def tracer_provider(**kwargs: Any) -> TracerProvider:
    """A ``TracerProvider`` whose tracers can emit a span under a chosen id (recovery needs it)."""
    return TracerProvider(id_generator=ForcedIds(), **kwargs)


def can_force_ids(tracer: Tracer) -> bool:
    return isinstance(getattr(tracer, "id_generator", None), ForcedIds)


@contextmanager
def forced_ids(tracer: Tracer, trace_id: int, span_id: int) -> Iterator[None]:
    ids = tracer.id_generator  # type: ignore[attr-defined]
    ids.wanted.trace_id, ids.wanted.span_id = trace_id, span_id
    try:
        yield
    finally:
        ids.wanted.trace_id = ids.wanted.span_id = None


def carrier_of(span: Span | None = None) -> dict[str, str]:
    """The W3C carrier (``traceparent``) of ``span``, or of the current span; empty if none."""
    carrier: dict[str, str] = {}
    context = trace.set_span_in_context(span) if span is not None else None
    PROPAGATOR.inject(carrier, context=context)
    return carrier


def context_of(carrier: Any) -> Context | None:
    """The context a stored carrier names (None: not a carrier, so a new trace)."""
    if not isinstance(carrier, dict) or not carrier.get("traceparent"):
        return None
    return PROPAGATOR.extract({"traceparent": carrier["traceparent"]})


def ids_of(carrier: Any) -> tuple[int, int] | None:
    """(trace_id, span_id) of a stored carrier's ``traceparent``."""
    span_context = trace.get_current_span(context_of(carrier)).get_span_context() if context_of(carrier) else None
    return (span_context.trace_id, span_context.span_id) if span_context and span_context.is_valid else None


def clean(attributes: dict[str, Any], prefix: str = "offload.") -> dict[str, Any]:
    """Attribute values OpenTelemetry takes, under ``prefix`` unless a key is already in a
    semantic-convention namespace (``gen_ai.*``, ``server.*``)."""
    out = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if not isinstance(value, (str, bool, int, float)) and not (
                isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
            value = str(value)
        out[key if key.startswith(_CONVENTION_NAMESPACES) else f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


class Handle:
    """What ``observers.span`` yields: ``set(**attributes)`` and ``fail(why)`` on the live span."""

    def __init__(self, span: Span, genai: bool = False) -> None:
        self._span, self._genai = span, genai

    def set(self, **attributes: Any) -> None:
        if not self._genai:
            self._span.set_attributes(clean(attributes))
            return
        translated = _translated(attributes)
        self._span.set_attributes(translated)
        if "gen_ai.usage.input_tokens" in translated or "finish_reason" in attributes:  # the call's outcome
            self._record(translated)

    def fail(self, description: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, redact_urls(description)[:500]))

    def raised(self, exc: BaseException) -> None:
        """The work raised: status ERROR and ``error.type`` (an HTTP status, else the exception's
        class), an ``exception`` event, and for a model call its duration in the GenAI metrics."""
        error_type = str(getattr(exc, "status_code", None) or type(exc).__qualname__)
        message = redact_urls(str(exc))
        self._span.set_attribute("error.type", error_type)
        self._span.add_event("exception", {"exception.type": type(exc).__qualname__, "exception.message": message[:2000]})
        self.fail(f"{type(exc).__name__}: {message}")
        if self._genai:
            self._record({"error.type": error_type})

    def _record(self, outcome: dict[str, Any]) -> None:
        started_ns = getattr(self._span, "start_time", None) or time.time_ns()
        opened = getattr(self._span, "attributes", {})
        genai_metrics.record({k: opened[k] for k in genai_metrics.CALL_ATTRIBUTES if opened.get(k) is not None},
                             (time.time_ns() - started_ns) / 1e9, outcome)


_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>(){}\[\],;]+")


def redact_urls(text: str) -> str:
    """``text`` with each URL cut to its host (and port): a base URL's path or query may hold a
    key or a tenant, and telemetry names the host only."""
    def host(match: re.Match[str]) -> str:
        parts = urlsplit(match.group(0))
        try:
            return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else "[url]"
        except ValueError:  # a malformed port
            return parts.hostname or "[url]"
    return _URL.sub(host, text)


# A model call is a GenAI client span: https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/
MODEL_CALL = "offload.model_call"
_GENAI_USAGE = {"prompt_tokens": "gen_ai.usage.input_tokens", "completion_tokens": "gen_ai.usage.output_tokens",
                "response_model": "gen_ai.response.model", "response_id": "gen_ai.response.id"}


def _translated(attributes: dict[str, Any]) -> dict[str, Any]:
    out = dict(attributes)
    for ours, theirs in _GENAI_USAGE.items():
        if ours in out:
            out[theirs] = out.pop(ours)
    if out.get("finish_reason"):
        out["gen_ai.response.finish_reasons"] = [str(out["finish_reason"])]
    return clean(out)


# gen_ai.provider.name's well-known values, by the API host that serves them. Any other host
# (llama.cpp, vLLM, Ollama, LiteLLM, a company proxy) speaks the OpenAI API without being OpenAI:
# it is named by what it speaks, and ``server.address`` says which server it was.
_PROVIDER_BY_HOST = {
    "api.openai.com": "openai", "openrouter.ai": "openrouter", "api.anthropic.com": "anthropic",
    "api.groq.com": "groq", "api.deepseek.com": "deepseek", "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai", "api.perplexity.ai": "perplexity", "api.cohere.com": "cohere",
    "generativelanguage.googleapis.com": "gcp.gemini",
}
OPENAI_COMPATIBLE = "openai_compatible"


def provider_of(base_url: object) -> dict[str, Any]:
    """``gen_ai.provider.name`` and ``server.address``/``server.port`` of a model endpoint."""
    try:
        parts = urlsplit(str(base_url or ""))
    except ValueError:  # an unparseable URL: the client will say so; the span names no host
        parts = urlsplit("")
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:  # a malformed port: the host is still known
        port = None
    if host.endswith(".openai.azure.com"):
        provider = "azure.ai.openai"
    else:
        provider = _PROVIDER_BY_HOST.get(host, "openai" if not host else OPENAI_COMPATIBLE)
    return {"gen_ai.provider.name": provider, "server.address": host or None, "server.port": port}


def start_kind(name: str, attributes: dict[str, Any]) -> tuple[str, SpanKind, dict[str, Any]]:
    """The name, kind and attributes a span site's ``observers.span(name, **attributes)`` becomes."""
    if name != MODEL_CALL:
        return name, SpanKind.INTERNAL, clean(attributes)
    model = str(attributes.get("model") or "")
    attributes = dict(attributes)
    endpoint = provider_of(attributes.pop("base_url", None))  # the host, never the whole URL
    genai = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, **endpoint,
             "gen_ai.conversation.id": attributes.get("conversation_id")}
    return f"chat {model}".strip(), SpanKind.CLIENT, clean({**attributes, **genai})
