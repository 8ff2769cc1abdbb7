"""Builders for fake OpenAI-compatible streaming responses served through httpx.MockTransport."""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, Iterator

import httpx

BASE_URL = "http://llm.test/v1"


def chunk(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
    no_choices: bool = False,
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    choices = [] if no_choices else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body: dict[str, Any] = {
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def tool_delta(index: int, *, call_id: str | None = None, name: str | None = None, args: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    delta: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        delta["id"] = call_id
        delta["type"] = "function"
    return delta


def sse_body(*chunks: dict[str, Any], done: bool = True) -> bytes:
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    if done:
        events.append(b"data: [DONE]\n\n")
    return b"".join(events)


def sse_response(*chunks: dict[str, Any], done: bool = True) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse_body(*chunks, done=done))


def error_response(status: int, message: str, *, code: str | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
    error: dict[str, Any] = {"message": message, "type": "invalid_request_error"}
    if code is not None:
        error["code"] = code
    return httpx.Response(status, headers=headers or {}, json={"error": error})


def hanging_response(first: list[dict[str, Any]], release: threading.Event) -> httpx.Response:
    """A stream that sends ``first`` and then nothing until ``release`` is set (test teardown)."""

    def body() -> Iterator[bytes]:
        yield sse_body(*first, done=False)
        release.wait(timeout=30)

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())


class ScriptedServer:
    """A MockTransport handler that answers requests from a script and records each request."""

    def __init__(self, *responses: httpx.Response | Callable[[httpx.Request], httpx.Response] | Exception) -> None:
        self._responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self._responses:
            raise AssertionError(f"unexpected request #{len(self.requests)} to {request.url}")
        item = self._responses.pop(0)
        if isinstance(item, Exception):
            raise item
        return item(request) if callable(item) else item

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def http_client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))
