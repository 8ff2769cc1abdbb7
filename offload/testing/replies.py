"""What the scripted model server says: ``Reply``, its builders, and ready-made scripts.

Owns the script side of ``offload/model_server.py``. A *script* is any callable
``script(request: dict) -> Reply``: it gets the parsed ``/v1/chat/completions`` request body
and describes one response. Nothing here is a model: replies are written by hand (or by a rule)
for demos, end-to-end tests and benchmarks.

Invariant: a ``Reply`` is validated when built, so a bad script fails where it is written, not
halfway through an HTTP response; it is frozen, so one ``Reply`` can be served many times.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, Union

ToolCallSpec = tuple[str, Union[Mapping[str, Any], str]]
"""(function name, arguments): a dict is sent as JSON; a str is sent verbatim (even invalid JSON)."""

DEFAULT_TEXT = "(scripted demo reply: no rule matched this message)"


@dataclass(frozen=True)
class Reply:
    """One scripted response to one chat-completions request.

    * ``text``: assistant content; streamed ``chunk_chars`` characters per SSE chunk with
      ``chunk_delay_s`` between chunks.
    * ``tool_calls``: ``(name, arguments)`` pairs, streamed as OpenAI tool_call deltas.
    * ``status``: 200, or an HTTP error status (400-599) answered with an OpenAI-style error body
      (``error_message`` / ``error_type`` / ``error_code`` override the defaults) and, when
      ``retry_after_s`` is set, ``Retry-After`` / ``retry-after-ms`` headers.
    * ``hang``: send the headers (and, when streaming, the text/tool-call chunks) but never
      finish; the handler waits until the server stops, then drops the connection.
    * ``delay_s``: wait this long before the first byte (cut short if the server stops).
    * ``finish_reason``: defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``.
    * ``cost_usd``: the call's price in ``usage.cost`` (as OpenRouter, or a LiteLLM proxy with
      ``include_cost_in_streaming_usage``, send it); None: no cost, as most servers.
    * ``headers``: extra ``(name, value)`` response headers (e.g. ``x-litellm-response-cost``).
    * ``report_usage``: False sends no ``usage`` at all (as some servers never do), even when asked.
    * ``send_finish``: False ends the reply without any ``finish_reason`` (a stream cut short by a
      proxy or a crashed server: ``[DONE]`` follows the last content chunk).
    """

    text: str = ""
    tool_calls: Sequence[ToolCallSpec] = field(default_factory=list)
    status: int = 200
    error_message: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    retry_after_s: float | None = None
    hang: bool = False
    delay_s: float = 0.0
    chunk_chars: int = 16
    chunk_delay_s: float = 0.0
    finish_reason: str | None = None
    cost_usd: float | None = None
    headers: Sequence[tuple[str, str]] = ()
    report_usage: bool = True
    send_finish: bool = True

    def __post_init__(self) -> None:
        if not (self.status == 200 or 400 <= self.status <= 599):
            raise ValueError(f"Reply.status must be 200 or an error status 400-599, got {self.status}")
        if self.status != 200 and self.hang:
            raise ValueError("Reply.hang only applies to a 200 reply; an error reply is sent whole")
        if self.chunk_chars < 1:
            raise ValueError(f"Reply.chunk_chars must be at least 1, got {self.chunk_chars}")
        for name, value in (("delay_s", self.delay_s), ("chunk_delay_s", self.chunk_delay_s)):
            if value < 0:
                raise ValueError(f"Reply.{name} must not be negative, got {value}")
        if self.retry_after_s is not None and self.retry_after_s < 0:
            raise ValueError(f"Reply.retry_after_s must not be negative, got {self.retry_after_s}")
        for call in self.tool_calls:
            if len(call) != 2 or not isinstance(call[0], str) or not call[0]:
                raise ValueError(f"each Reply.tool_calls entry must be (name, arguments), got {call!r}")
            if not isinstance(call[1], (Mapping, str)):
                raise ValueError(f"tool call arguments must be a dict or a JSON string, got {call[1]!r}")
        object.__setattr__(self, "tool_calls", list(self.tool_calls))

    @property
    def is_error(self) -> bool:
        return self.status != 200

    @property
    def effective_finish_reason(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


Script = Callable[[dict[str, Any]], Reply]
Outcome = Union[Reply, Callable[[dict[str, Any]], Reply]]


# --- builders ------------------------------------------------------------------------------


def text_reply(text: str, **options: Any) -> Reply:
    return Reply(text=text, **options)


def tool_call_reply(name: str, arguments: Mapping[str, Any] | str | None = None, *, text: str = "", **options: Any) -> Reply:
    return Reply(text=text, tool_calls=[(name, {} if arguments is None else arguments)], **options)


def error_reply(status: int, message: str | None = None, *, retry_after_s: float | None = None, **options: Any) -> Reply:
    return Reply(status=status, error_message=message, retry_after_s=retry_after_s, **options)


def hang_reply(partial_text: str = "", **options: Any) -> Reply:
    """Streams ``partial_text`` (if any), then never finishes until the server stops."""
    return Reply(text=partial_text, hang=True, **options)


# --- scripts --------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def last_message_text(request: Mapping[str, Any]) -> str:
    """Text of the last ``user`` or ``tool`` message: what the scripted model "answers"."""
    for message in reversed(request.get("messages") or []):
        if isinstance(message, dict) and message.get("role") in ("user", "tool"):
            return _content_text(message.get("content"))
    return ""


def rule_script(
    rules: Sequence[tuple[Callable[[str], bool], Outcome]], default: Outcome | None = None
) -> Script:
    """First rule whose predicate accepts the last user/tool message text wins.

    An outcome is a ``Reply`` or a callable ``(request) -> Reply``; ``default`` (a short text
    reply unless given) answers when no rule matches.
    """
    frozen_rules = list(rules)
    fallback: Outcome = default if default is not None else text_reply(DEFAULT_TEXT)

    def script(request: dict[str, Any]) -> Reply:
        text = last_message_text(request)
        for predicate, outcome in frozen_rules:
            if predicate(text):
                return outcome(request) if callable(outcome) else outcome
        return fallback(request) if callable(fallback) else fallback

    return script


def sequence_script(replies: Sequence[Reply], then: Reply | None = None) -> Script:
    """Answer with ``replies`` in order, one per request; afterwards ``then``.

    Without ``then``, requests past the end get a 500 saying the sequence ran out, so a test
    that makes one call too many fails loudly instead of looping.
    """
    queue = list(replies)
    lock = threading.Lock()  # the server answers requests on several threads
    served = [0]

    def script(request: dict[str, Any]) -> Reply:
        with lock:
            index = served[0]
            served[0] += 1
        if index < len(queue):
            return queue[index]
        if then is not None:
            return then
        return error_reply(
            500, f"scripted sequence exhausted: it has {len(queue)} replies and this is request {index + 1}"
        )

    return script
