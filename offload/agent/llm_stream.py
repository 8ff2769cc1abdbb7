"""Reading one streamed Chat Completions response: the chunk pump and the turn assembler.

Owns: ``AssistantTurn`` (what one model call produced), ``TurnAssembler`` (chunk dicts →
turn, tool-call deltas joined by index) and ``StreamPump`` (opens and iterates the stream on
a daemon thread, folding each chunk in there, and hands the end over a queue). Invariant: the
consumer never blocks on the socket — it waits on the queue in short slices — so an interrupt
or the idle timeout ends a call within one poll interval even when the server sends nothing
at all (and an interrupt at the next chunk when one comes sooner).
"""
from __future__ import annotations

import functools
import json
import logging
import math
import queue
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

# How long a stream may stay silent (no chunk, keep-alive or progress) before the call fails;
# `stream_idle_timeout_s` in config.yaml. Here, not in llm.py, so reading the config does not
# import the HTTP client.
DEFAULT_STREAM_IDLE_TIMEOUT_S = 120.0

logger = logging.getLogger(__name__)

CHUNK, END, ERROR, ALIVE, STOPPED = "chunk", "end", "error", "alive", "stopped"

# ``AssistantTurn.finish_reason`` when the stream ended without the server giving one: the
# reply stopped, but nobody said it was finished, so it counts as cut off.
MISSING_FINISH = "missing"
# Finish reasons of a reply the model did not finish: the output token limit ("length"), a
# provider's filter, or no reason at all. Such a reply is never presented as complete.
CUT_OFF_REASONS = frozenset({"length", "content_filter", MISSING_FINISH})


@dataclass
class AssistantTurn:
    """One model reply. ``tool_calls`` items are ``{"id", "name", "arguments_json"}``.

    ``finish_reason`` is the provider's ("stop", "tool_calls", "length", ...), ``MISSING_FINISH``
    when the stream ended without one, or "interrupted" when ``should_stop`` ended the read.
    An interrupted or cut-off turn (``truncated``) carries no tool calls because their
    arguments may be cut off mid-JSON.
    """

    content: str
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, int] | None = None
    response_model: str | None = None  # the model and completion id the server named (telemetry)
    response_id: str | None = None

    @property
    def truncated(self) -> bool:
        """The model did not finish this reply: the server cut it off, or never said why it ended."""
        return self.finish_reason in CUT_OFF_REASONS


TAIL_CHARS = 240


class TurnAssembler:
    """Accumulates streamed chunks of a single choice into an ``AssistantTurn``."""

    def __init__(self) -> None:
        self.chunk_count = 0
        self._content: list[str] = []
        self._slots: list[dict[str, str]] = []
        self._slot_by_index: dict[int, int] = {}
        self._finish_reason: str | None = None
        self._usage: dict[str, int] | None = None
        self._header_cost_usd: float | None = None  # a gateway's cost header (LiteLLM's), if it sent one
        self.text_chars = 0  # characters of answer text so far
        self.text_tail = ""  # its last TAIL_CHARS, kept as it grows (a roster line shows it)
        self.response_model: str | None = None
        self.response_id: str | None = None

    def read_headers(self, headers: Mapping[str, str]) -> None:
        """Note the call's cost from a gateway's response header (before the first chunk)."""
        self._header_cost_usd = header_cost_usd(headers)

    def add(self, chunk: Any) -> None:
        """Fold one streamed chunk (the server's JSON object) in. Raises TypeError on odd shapes."""
        if not isinstance(chunk, dict):
            raise TypeError(f"a chunk is a {type(chunk).__name__}, not an object")
        self.chunk_count += 1
        if self.chunk_count == 1:  # every chunk repeats them: the first one says
            self.response_model, self.response_id = _text(chunk.get("model")), _text(chunk.get("id"))
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = _usage_dict(usage)
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise TypeError(f"'choices' is a {type(choices).__name__}, not a list")
        for choice in choices:
            if _field(choice, "index") not in (0, None):
                continue  # we never ask for n > 1
            delta = _field(choice, "delta")
            if delta is not None:
                content = _field(delta, "content")
                if content:
                    self._content.append(str(content))
                    self.text_chars += len(str(content))
                    self.text_tail = (self.text_tail + str(content))[-TAIL_CHARS:]
                for tool_delta in _field(delta, "tool_calls") or []:
                    self._add_tool_delta(tool_delta)
            finish_reason = _field(choice, "finish_reason")
            if finish_reason:
                self._finish_reason = str(finish_reason)

    def _add_tool_delta(self, tool_delta: Any) -> None:
        call_id = _field(tool_delta, "id")
        slot = self._slot_for(_field(tool_delta, "index"), call_id)
        if call_id:
            slot["id"] = str(call_id)
        function = _field(tool_delta, "function")
        if function is None:
            return
        name = _field(function, "name")
        # Some servers repeat the name on every delta; only a different piece is appended.
        if name and name != slot["name"]:
            slot["name"] += str(name)
        arguments = _field(function, "arguments")
        if isinstance(arguments, dict):  # a few local servers send an object, not a string
            arguments = json.dumps(arguments)
        if arguments:
            slot["arguments_json"] += str(arguments)

    def _slot_for(self, index: int | None, call_id: str | None) -> dict[str, str]:
        if index is None:
            # No index: a new id starts a new call, anything else continues the last one.
            if not self._slots or (call_id and self._slots[-1]["id"] not in ("", call_id)):
                self._slots.append({"id": "", "name": "", "arguments_json": ""})
            return self._slots[-1]
        position = self._slot_by_index.get(index)
        if position is not None:
            known_id = self._slots[position]["id"]
            if not (call_id and known_id and known_id != call_id):
                return self._slots[position]
        # New index, or a server that reuses index 0 for every call but gives each its own id.
        self._slots.append({"id": "", "name": "", "arguments_json": ""})
        self._slot_by_index[index] = len(self._slots) - 1
        return self._slots[-1]

    def result(self, *, interrupted: bool = False) -> AssistantTurn:
        content = "".join(self._content)
        usage = self._usage
        if usage is not None and "cost_usd" not in usage and self._header_cost_usd is not None:
            usage = {**usage, "cost_usd": self._header_cost_usd}  # the body's usage.cost wins
        if interrupted:
            return AssistantTurn(content, [], "interrupted", usage, *self._named)
        finish = self._finish_reason or MISSING_FINISH
        if finish in CUT_OFF_REASONS:  # a cut-off call's arguments may be cut mid-JSON: never run them
            return AssistantTurn(content, [], finish, usage, *self._named)
        calls = [dict(slot) for slot in self._slots if slot["name"]]
        for call in calls:
            call["id"] = call["id"] or f"call_{uuid.uuid4().hex[:12]}"
        return AssistantTurn(content, calls, finish, usage, *self._named)

    @property
    def _named(self) -> tuple[str | None, str | None]:
        return self.response_model, self.response_id


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _field(obj: Any, key: str) -> Any:
    if not isinstance(obj, dict):
        raise TypeError(f"expected an object holding '{key}', got a {type(obj).__name__}")
    return obj.get(key)


def _usage_dict(usage: Any) -> dict[str, Any]:
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    out: dict[str, Any] = {key: int(_field(usage, key) or 0) for key in keys}
    # The call's price in USD: OpenRouter's usage.cost (credits, 1 credit = 1 USD), and a LiteLLM
    # proxy's with ``include_cost_in_streaming_usage``. Absent: unknown (never taken as 0).
    cost = usage.get("cost")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0:
        out["cost_usd"] = float(cost)
    return out


COST_HEADER = "x-litellm-response-cost"  # a LiteLLM proxy's price of the call, when known as headers go out


def header_cost_usd(headers: Mapping[str, str]) -> float | None:
    """The call's cost from a gateway header, or None (absent, empty, "None", negative, not a number)."""
    raw = headers.get(COST_HEADER)
    try:
        cost = float(raw) if raw else None
    except ValueError:
        return None
    return cost if cost is not None and math.isfinite(cost) and cost >= 0 else None


@functools.lru_cache(maxsize=1)
def _readers() -> Any:
    """The streams' threads: a reader that is done waits for the next stream instead of
    exiting, as starting a thread costs its starter a wait for the new thread to run (~35 us
    of CPU per model call). Never full: a stream never waits for a reader (an abandoned one
    may hold its reader until the HTTP read timeout). Built on first use: reading the config
    imports this module."""
    from offload.engine.pool import DaemonThreadPool

    return DaemonThreadPool(2 ** 31 - 1, "llm-stream")


class StreamPump:
    """Opens and reads one stream on a daemon thread; the caller waits for its end with ``get``.

    Each chunk and keep-alive is handed to ``on_data(kind, value)`` on the pump's own thread
    (``(CHUNK, chunk)``, or ``(ALIVE, None)``: the server sent a keep-alive, no data but alive),
    which folds it into the turn: waking the caller for every chunk cost a thread switch each.
    ``on_data`` returns True when the caller asked to stop. The caller gets ``(END, None)``,
    ``(ERROR, exception)`` (the stream's, or one ``on_data`` raised) or ``(STOPPED, None)``;
    ``last_data_at`` is ``clock()`` at the start and at the last chunk or keep-alive.
    ``open_stream(alive, done)`` gets the callbacks that report a keep-alive and the stream's
    end (``[DONE]``: the caller is told at once, while the stream's rest is read to keep its
    connection). After ``abandon`` (or a stop) nothing more is
    handed over: the thread stops at its next chunk and closes the response; a silent server
    holds it only until the HTTP read timeout, which is set just above the idle timeout.
    """

    def __init__(self, open_stream: Callable[[Callable[[], None], Callable[[], None]], Iterable[Any]],
                 on_data: Callable[[str, Any], bool], clock: Callable[[], float]) -> None:
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._abandoned = threading.Event()
        self._on_data, self._clock = on_data, clock
        self._ended = False  # END or ERROR was handed over
        self.last_data_at = clock()
        self._open_stream = open_stream

    def start(self) -> StreamPump:
        _readers().start(lambda: self._run(self._open_stream))
        return self

    def get(self, timeout_s: float) -> tuple[str, Any] | None:
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def abandon(self) -> None:
        self._abandoned.set()

    def _hand_over(self, kind: str, value: Any) -> None:
        if self._abandoned.is_set():
            return
        self.last_data_at = self._clock()
        if self._on_data(kind, value):
            self._abandoned.set()
            self._queue.put((STOPPED, None))

    def _end(self) -> None:
        if not self._ended and not self._abandoned.is_set():
            self._ended = True
            self._queue.put((END, None))

    def _run(self, open_stream: Callable[[Callable[[], None], Callable[[], None]], Iterable[Any]]) -> None:
        stream: Any = None
        try:
            stream = open_stream(lambda: self._hand_over(ALIVE, None), self._end)
            for chunk in stream:
                if self._abandoned.is_set():
                    break
                self._hand_over(CHUNK, chunk)
            self._end()
        except Exception as exc:  # the consumer classifies it; the thread must not die loudly
            if not self._ended:  # a failure reading the rest after [DONE] is nobody's business
                self._ended = True
                self._queue.put((ERROR, exc))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # closing a broken connection can fail; nothing to do
                    logger.debug("closing an abandoned LLM stream failed", exc_info=True)
