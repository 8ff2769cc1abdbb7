"""The LLM client: one streamed Chat Completions call with tools, over httpx.

Owns: ``LLMClient.stream_turn`` — open the stream, assemble the reply, retry transient
failures. The wire format is ``offload.agent.llm_sse`` (plain httpx and SSE parsing, not the
``openai`` SDK, whose per-chunk models cost a fan-out most of its CPU); retries are ours
because they must be interruptible (``should_stop`` is polled during backoff) and observable
(logged, ``on_retry``). Works with any OpenAI-compatible ``base_url`` (OpenAI, OpenRouter,
Ollama, vLLM, llama.cpp).

Invariant: ``stream_turn`` either returns an ``AssistantTurn`` or raises ``LLMError`` — never
an httpx or wire exception, and never hangs: a silent server ends in ``stream_idle_timeout_s``
(config ``stream_idle_timeout_s`` / ``delegation.stream_idle_timeout_s``), an interrupt within
``poll_interval_s``. Anything the server sends counts as life: a chunk, an SSE keep-alive
comment, or llama.cpp's prompt-progress chunks, which a local server is asked for
(``return_progress``) because a CPU server reading a long prompt is otherwise silent for minutes.
"""
from __future__ import annotations

import functools
import ipaddress
import json
import logging
import random
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlparse

import httpx

from offload.agent.llm_errors import LLMError, ModelNotFoundError, classify_status, provider_message, retry_after_s
from offload.agent.llm_sse import HTTPStatusFailure, StreamErrorEvent, TransportFailure, stream_chunks
from offload.agent.llm_stream import DEFAULT_STREAM_IDLE_TIMEOUT_S  # noqa: F401 - re-exported
from offload.agent.llm_stream import CHUNK, END, STOPPED, AssistantTurn, StreamPump, TurnAssembler
from offload.engine.observers import span_event

__all__ = ["AssistantTurn", "LLMClient", "LLMError", "ModelNotFoundError", "RetryNotice"]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Some proxies refuse a bare "Bearer"; local servers (Ollama, llama.cpp, vLLM) ignore whatever we send.
PLACEHOLDER_API_KEY = "not-needed"
# The config key that sets a client's silence limit: a parent's own, a subagent's under ``delegation``.
PARENT_IDLE_TIMEOUT_KEY = "stream_idle_timeout_s"
CHILD_IDLE_TIMEOUT_KEY = "delegation.stream_idle_timeout_s"
# Request fields a server may refuse with a 400 naming them: asked for, and dropped on refusal.
# stream_options.include_usage: usage in the stream (old servers refuse it); return_progress:
# llama.cpp's prompt-progress chunks (hosted APIs refuse unknown fields, so only local servers
# are asked).
_OPTIONAL_FIELDS = ("stream_options", "return_progress")


def is_local_server(base_url: str) -> bool:
    """A server on this machine or the LAN (loopback, private address, or a one-label host name such
    as a container's): where llama.cpp and its kin run, and no hosted API does."""
    host = (urlparse(base_url).hostname or "").lower()
    if host == "localhost" or (host and "." not in host and ":" not in host):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.endswith((".local", ".lan", ".internal"))
    return address.is_loopback or address.is_private or address.is_link_local


@dataclass(frozen=True)
class RetryNotice:
    """Passed to ``on_retry`` before each backoff wait."""

    attempt: int  # 1-based number of the attempt that failed
    delay_s: float
    reason: str


@dataclass(frozen=True)
class _Failure:
    error: LLMError
    retryable: bool
    retry_after_s: float | None = None


def _never_stop() -> bool:
    return False


@functools.lru_cache(maxsize=1)
def _shared_ssl_context() -> ssl.SSLContext:
    """One TLS context per process, shared by every client's connection pool.

    Building one loads the whole CA bundle: tens of milliseconds of CPU that hold the GIL
    (when each child agent had its own client, a fan-out of 50 children spent most of its wall
    time loading the same certificates 50 times: benchmark case 4). An SSLContext is safe to
    share between connections and threads.
    """
    return httpx.create_ssl_context()


def preload() -> None:
    """Pay the HTTP stack's one-time costs now: the TLS context (the CA bundle) and the
    transport's modules, which httpx imports only when its first client is built (httpcore,
    and trio when that is installed: ~0.1-0.3 s of CPU under the GIL).

    A long-lived process that will run children (``offload worker``) calls this before it
    takes work, so its first units do not pay it while holding the GIL."""
    shared_http_client()


# Idle connections are closed after 2 s, well under the keep-alive timeout of common servers
# (5 s: uvicorn, llama.cpp, Node), so a reused connection is not one the server is closing.
_SHARED_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=20, keepalive_expiry=2.0)
_shared_lock = threading.Lock()
_JITTER = random.Random()  # backoff jitter; seeding one per client read 2.5 KB of urandom each
_shared: list[httpx.Client] = []


def shared_http_client() -> httpx.Client:
    """The process's one HTTP client for model calls, kept for the process's life.

    A client per agent cost every subagent a new connection pool, a scan of the whole
    environment for proxy settings and a new TCP (or TLS) connection to the model server:
    ~0.1-0.2 ms of CPU per child, a twentieth of an ``offload worker``'s CPU per unit
    (benchmark case 5). One client reuses kept-alive connections; it never waits for a free
    one (no connection cap: a fan-out of 50 children opens 50), and each request carries its
    own timeouts, so clients with different settings share it. httpx clients are thread-safe.
    """
    with _shared_lock:
        if not _shared:
            _shared.append(httpx.Client(verify=_shared_ssl_context(), limits=_SHARED_LIMITS))
        return _shared[0]


class LLMClient:
    """Streams Chat Completions turns from one model at one endpoint."""

    def __init__(
        self,
        model: str,
        base_url: str | None,
        api_key: str | None,
        *,
        http_client: httpx.Client | None = None,
        connect_timeout_s: float = 15.0,
        stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S,
        idle_timeout_key: str = PARENT_IDLE_TIMEOUT_KEY,
        max_retries: int = 4,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 30.0,
        retry_after_cap_s: float = 60.0,
        poll_interval_s: float = 0.25,
        include_usage: bool = True,
        extra_body: dict[str, Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_retry: Callable[[RetryNotice], None] | None = None,
    ) -> None:
        self.model = model
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.max_retries = max(0, int(max_retries))
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self.idle_timeout_key = idle_timeout_key  # the key the idle error tells the user to raise
        self._backoff_base_s, self._backoff_cap_s = backoff_base_s, backoff_cap_s
        self._retry_after_cap_s = retry_after_cap_s
        self._poll_interval_s = poll_interval_s
        self._optional: dict[str, Any] = {}  # dropped one by one when the server refuses them
        if include_usage:
            self._optional["stream_options"] = {"include_usage": True}
        if is_local_server(self.base_url):
            self._optional["return_progress"] = True
        self._extra_body = dict(extra_body or {})
        self._sleep, self._clock = sleep, clock
        self._rng = rng or _JITTER
        self._on_retry = on_retry
        # The HTTP read timeout only frees an abandoned reader thread; the idle check in
        # _read_stream fires first, so it sits a little above stream_idle_timeout_s.
        self._timeout = httpx.Timeout(connect_timeout_s, read=self.stream_idle_timeout_s + 5.0)
        self._http_client = http_client or shared_http_client()  # every request passes self._timeout
        self._url = f"{self.base_url}/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key or PLACEHOLDER_API_KEY}",
                         "Content-Type": "application/json", "Accept": "text/event-stream"}

    def close(self) -> None:
        """Nothing to release: the HTTP client is the process's shared one (its idle connections
        close after a few seconds) or the caller's."""

    def stream_turn(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        on_activity: Callable[[], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> AssistantTurn:
        """One model call: stream it, retrying 429/5xx/connection failures with backoff.
        ``on_text(tail)``: after each chunk that adds text, the tail of the answer so far."""
        should_stop = should_stop or _never_stop
        for attempt in range(self.max_retries + 1):
            if should_stop():
                return AssistantTurn("", [], "interrupted")
            try:
                return self._attempt(messages, tools or [], on_activity, should_stop, on_text)
            except Exception as exc:  # sorted into retry / fail-fast right below
                failure = self._classify(exc)
                if not failure.retryable or attempt == self.max_retries:
                    if failure.error is exc:
                        raise
                    raise failure.error from exc
            delay_s = self._delay_s(attempt, failure.retry_after_s)
            self._announce_retry(RetryNotice(attempt + 1, delay_s, str(failure.error)))
            if self._wait_unless_stopped(delay_s, should_stop):
                return AssistantTurn("", [], "interrupted")
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_activity: Callable[[], None] | None,
        should_stop: Callable[[], bool],
        on_text: Callable[[str], None] | None = None,
    ) -> AssistantTurn:
        while True:
            try:
                assembler = TurnAssembler()
                on_data = self._folder(assembler, on_activity, should_stop, on_text)
                return self._read_stream(self._open(messages, tools, assembler, on_data), assembler, should_stop)
            except HTTPStatusFailure as exc:
                refused = [name for name in self._optional if exc.status_code == 400 and name in exc.text]
                if not refused:
                    raise
                # The server refuses a field we could do without (named in its 400): ask again without it.
                logger.info("%s refuses %s; asking again without it", self.base_url, refused[0])
                del self._optional[refused[0]]

    def _open(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              assembler: TurnAssembler, on_data: Callable[[str, Any], bool]) -> StreamPump:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if tools:  # OpenAI rejects an empty tools array
            body["tools"] = tools
        body.update(self._optional)
        body.update(self._extra_body)
        return StreamPump(lambda alive, done: stream_chunks(self._http_client, self._url, headers=self._headers,
                                                            body=body, timeout=self._timeout, on_alive=alive,
                                                            on_headers=assembler.read_headers, on_done=done),
                          on_data, self._clock).start()

    def _folder(self, assembler: TurnAssembler, on_activity: Callable[[], None] | None,
                should_stop: Callable[[], bool], on_text: Callable[[str], None] | None = None
                ) -> Callable[[str, Any], bool]:
        """What the pump does with each chunk or keep-alive, on its thread: fold a chunk in, tell
        the observers; whether the caller asked to stop (so it is seen at every chunk)."""
        def on_data(kind: str, value: Any) -> bool:
            if kind == CHUNK:
                wrote = assembler.text_chars
                self._add_chunk(assembler, value)
                if on_text is not None and assembler.text_chars != wrote:
                    _notify(on_text, assembler.text_tail)
            _notify(on_activity)
            return should_stop()
        return on_data

    def _read_stream(self, pump: StreamPump, assembler: TurnAssembler, should_stop: Callable[[], bool]
                     ) -> AssistantTurn:
        try:
            while True:
                if should_stop():
                    return assembler.result(interrupted=True)
                item = pump.get(self._poll_interval_s)
                if item is None:
                    if self._clock() - pump.last_data_at >= self.stream_idle_timeout_s:
                        raise self._idle_error()
                    continue
                kind, value = item
                if kind == END:
                    return self._finished(assembler)
                if kind == STOPPED:
                    return assembler.result(interrupted=True)
                raise value
        finally:
            pump.abandon()

    def _add_chunk(self, assembler: TurnAssembler, chunk: Any) -> None:
        try:
            assembler.add(chunk)
        except (AttributeError, TypeError, ValueError) as exc:
            raise LLMError(
                f"malformed stream chunk from {self.base_url} ({type(exc).__name__}: {exc}); "
                "the server is not speaking the OpenAI streaming format — check base_url"
            ) from exc

    def _finished(self, assembler: TurnAssembler) -> AssistantTurn:
        if assembler.chunk_count == 0:
            raise LLMError(
                f"the stream from {self.base_url} ended without a single completion chunk; the "
                "server may not support streaming Chat Completions — check base_url and the server"
            )
        return assembler.result()

    def _idle_error(self) -> LLMError:
        return LLMError(
            f"model '{self.model}' at {self.base_url} sent nothing for "
            f"{self.stream_idle_timeout_s:g} s; the server is stuck or overloaded — retry later, or "
            f"for a slow server (a CPU reading a long prompt) raise {self.idle_timeout_key}: "
            f"offload config set {self.idle_timeout_key} {max(600, round(2 * self.stream_idle_timeout_s)):g}"
        )

    def _classify(self, exc: Exception) -> _Failure:
        if isinstance(exc, LLMError):
            return _Failure(exc, exc.retryable)
        if isinstance(exc, HTTPStatusFailure):
            return self._classify_status_error(exc)
        if isinstance(exc, TransportFailure):  # connect, read or timeout, before or mid-stream
            cause = exc.__cause__ or exc
            return _Failure(LLMError(
                f"could not reach {self.base_url} ({type(cause).__name__}: {cause}); check that "
                "the server is running and base_url is right", retryable=True), True)
        if isinstance(exc, StreamErrorEvent):  # an error event inside a 200 stream
            return self._classify_stream_error(exc)
        if isinstance(exc, json.JSONDecodeError):
            return _Failure(LLMError(
                f"malformed JSON in the stream from {self.base_url} ({exc}); the server is not "
                "speaking the OpenAI streaming format — check base_url"), False)
        return _Failure(LLMError(
            f"unexpected {type(exc).__name__} talking to {self.base_url}: {exc}"), False)

    def _classify_status_error(self, exc: HTTPStatusFailure) -> _Failure:
        verdict = classify_status(exc.status_code, exc.body, model=self.model, base_url=self.base_url)
        if verdict.error is not None:
            return _Failure(verdict.error, False)
        error = LLMError(
            f"HTTP {exc.status_code} from {self.base_url} for model '{self.model}' "
            f"({provider_message(exc.body)}); the server is overloaded or failing — retry later",
            status_code=exc.status_code, retryable=True)
        wait_s = retry_after_s(exc.headers, cap_s=self._retry_after_cap_s, now_s=time.time())
        return _Failure(error, True, wait_s)

    def _classify_stream_error(self, exc: StreamErrorEvent) -> _Failure:
        body = exc.body if isinstance(exc.body, dict) else {}
        try:
            code = int(body.get("code"))  # OpenRouter puts the upstream HTTP status here
        except (TypeError, ValueError):
            code = 0
        retryable = code == 429 or code >= 500
        return _Failure(LLMError(
            f"{self.base_url} reported an error mid-stream for model '{self.model}': {exc.message}",
            status_code=code or None, retryable=retryable), retryable)

    def _delay_s(self, attempt: int, server_wait_s: float | None) -> float:
        if server_wait_s is not None:
            return server_wait_s
        ceiling_s = min(self._backoff_cap_s, self._backoff_base_s * (2 ** attempt))
        return ceiling_s * (0.5 + 0.5 * self._rng.random())  # jitter spreads synchronized retries

    def _announce_retry(self, notice: RetryNotice) -> None:
        logger.warning("LLM call attempt %d failed, retrying in %.1f s: %s", notice.attempt, notice.delay_s, notice.reason)
        span_event("retry", attempt=notice.attempt, delay_s=notice.delay_s, reason=notice.reason[:500])
        _notify(self._on_retry, notice)

    def _wait_unless_stopped(self, delay_s: float, should_stop: Callable[[], bool]) -> bool:
        """Sleep ``delay_s`` in poll-sized slices; True as soon as ``should_stop`` says so."""
        waited_s = 0.0
        while waited_s < delay_s:
            if should_stop():
                return True
            step_s = min(self._poll_interval_s, delay_s - waited_s)
            self._sleep(step_s)
            waited_s += step_s
        return should_stop()


def _notify(callback: Callable[..., None] | None, *args: Any) -> None:
    """Observer callbacks must never break a model call."""
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:
        logger.exception("LLM client observer callback failed")
