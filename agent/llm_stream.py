"""Reading one streamed Chat Completions response: the chunk pump and the turn assembler.

Owns: ``AssistantTurn`` (what one model call produced), ``TurnAssembler`` (chunks → turn,
tool-call deltas joined by index) and ``StreamPump`` (opens and iterates the SDK stream on a
daemon thread and hands chunks over a queue). Invariant: the consumer never blocks on the
socket — it waits on the queue in short slices — so an interrupt or the idle timeout ends a
call within one poll interval even when the server sends nothing at all.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

logger = logging.getLogger(__name__)

CHUNK, END, ERROR = "chunk", "end", "error"


@dataclass
class AssistantTurn:
    """One model reply. ``tool_calls`` items are ``{"id", "name", "arguments_json"}``.

    ``finish_reason`` is the provider's ("stop", "tool_calls", "length", ...) or "interrupted"
    when ``should_stop`` ended the read; an interrupted turn carries no tool calls because
    their arguments may be cut off mid-JSON.
    """

    content: str
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, int] | None = None


class TurnAssembler:
    """Accumulates streamed chunks of a single choice into an ``AssistantTurn``."""

    def __init__(self) -> None:
        self.chunk_count = 0
        self._content: list[str] = []
        self._slots: list[dict[str, str]] = []
        self._slot_by_index: dict[int, int] = {}
        self._finish_reason: str | None = None
        self._usage: dict[str, int] | None = None

    def add(self, chunk: Any) -> None:
        """Fold one ``ChatCompletionChunk`` in. Raises AttributeError/TypeError on odd shapes."""
        self.chunk_count += 1
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._usage = _usage_dict(usage)
        choices = getattr(chunk, "choices", None) or []
        if not isinstance(choices, list):
            raise TypeError(f"'choices' is a {type(choices).__name__}, not a list")
        for choice in choices:
            if getattr(choice, "index", 0) not in (0, None):
                continue  # we never ask for n > 1
            delta = getattr(choice, "delta", None)
            if delta is not None:
                if getattr(delta, "content", None):
                    self._content.append(str(delta.content))
                for tool_delta in getattr(delta, "tool_calls", None) or []:
                    self._add_tool_delta(tool_delta)
            if getattr(choice, "finish_reason", None):
                self._finish_reason = str(choice.finish_reason)

    def _add_tool_delta(self, tool_delta: Any) -> None:
        call_id = getattr(tool_delta, "id", None)
        slot = self._slot_for(getattr(tool_delta, "index", None), call_id)
        if call_id:
            slot["id"] = str(call_id)
        function = getattr(tool_delta, "function", None)
        if function is None:
            return
        name = getattr(function, "name", None)
        # Some servers repeat the name on every delta; only a different piece is appended.
        if name and name != slot["name"]:
            slot["name"] += str(name)
        arguments = getattr(function, "arguments", None)
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
        if interrupted:
            return AssistantTurn(content, [], "interrupted", self._usage)
        calls = [dict(slot) for slot in self._slots if slot["name"]]
        for call in calls:
            call["id"] = call["id"] or f"call_{uuid.uuid4().hex[:12]}"
        finish = self._finish_reason or ("tool_calls" if calls else "stop")
        return AssistantTurn(content, calls, finish, self._usage)


def _usage_dict(usage: Any) -> dict[str, Any]:
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    out: dict[str, Any] = {key: int(getattr(usage, key, 0) or 0) for key in keys}
    cost = getattr(usage, "cost", None)  # reported by some providers (e.g. OpenRouter), in USD
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        out["cost_usd"] = float(cost)
    return out


class StreamPump:
    """Opens and reads one stream on a daemon thread; the caller pulls items with ``get``.

    Items are ``(CHUNK, chunk)``, ``(END, None)`` or ``(ERROR, exception)``. After ``abandon``
    the thread stops at its next chunk and closes the response; a silent server holds it only
    until the HTTP read timeout, which is set just above the idle timeout.
    """

    def __init__(self, open_stream: Callable[[], Iterable[Any]]) -> None:
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._abandoned = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(open_stream,), name="llm-stream", daemon=True)

    def start(self) -> StreamPump:
        self._thread.start()
        return self

    def get(self, timeout_s: float) -> tuple[str, Any] | None:
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def abandon(self) -> None:
        self._abandoned.set()

    def _run(self, open_stream: Callable[[], Iterable[Any]]) -> None:
        stream: Any = None
        try:
            stream = open_stream()
            for chunk in stream:
                if self._abandoned.is_set():
                    break
                self._queue.put((CHUNK, chunk))
            self._queue.put((END, None))
        except Exception as exc:  # the consumer classifies it; the thread must not die loudly
            self._queue.put((ERROR, exc))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # closing a broken connection can fail; nothing to do
                    logger.debug("closing an abandoned LLM stream failed", exc_info=True)
