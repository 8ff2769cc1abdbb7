"""The wire side of one streamed Chat Completions call: POST with httpx, read Server-Sent Events.

Owns: ``stream_chunks`` (open the request, yield each ``data:`` payload as the dict the server
sent), ``iter_sse`` (the SSE line grammar over raw byte pieces), and the failures they raise.
Why not the ``openai`` SDK's stream: a fan-out runs every child's stream through one GIL, and
the SDK spent most of a child's CPU building a pydantic model for each chunk and transforming
the request (benchmark case 4; README "Targets"); plain ``json.loads`` dicts do the same job.

Invariants: byte pieces may split a line, a ``\\r\\n`` or a UTF-8 character anywhere — lines
are joined before they are decoded; comment lines (``: keep-alive``) and unknown fields are
skipped; ``data: [DONE]`` ends the stream; an event left without its blank line at EOF is
dropped (the SSE rule). Only these leave ``stream_chunks``: ``HTTPStatusFailure``,
``TransportFailure``, ``StreamErrorEvent`` and ``json.JSONDecodeError`` — the caller sorts
them into retry or fail-fast.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Iterator

import httpx


class HTTPStatusFailure(Exception):
    """The server answered with an error status. ``body`` is the JSON ``error`` object (or
    the whole JSON body, or the raw text); ``text`` is the raw body."""

    def __init__(self, status_code: int, body: Any, text: str, headers: httpx.Headers) -> None:
        super().__init__(f"HTTP {status_code}: {text[:200]}")
        self.status_code, self.body, self.text, self.headers = status_code, body, text, headers


class TransportFailure(Exception):
    """The connection failed or timed out, before or during the stream; ``__cause__`` says how."""


class StreamErrorEvent(Exception):
    """An error event inside a 200 stream (OpenRouter and others report upstream failures so)."""

    def __init__(self, message: str, body: Any) -> None:
        super().__init__(message)
        self.message, self.body = message, body


def stream_chunks(client: httpx.Client, url: str, *, headers: dict[str, str], body: dict[str, Any],
                  timeout: httpx.Timeout, on_alive: Callable[[], None] | None = None,
                  on_headers: Callable[[httpx.Headers], None] | None = None,
                  on_done: Callable[[], None] | None = None) -> Iterator[dict[str, Any]]:
    """POST ``body`` and yield each streamed JSON payload; closes the response when done or closed.

    ``on_alive`` is called for each SSE comment (``: keep-alive``, OpenRouter's ``: PROCESSING``):
    no payload, but the server is alive. ``on_headers`` gets a successful response's headers
    before its first payload (a gateway's cost header). ``on_done`` is called at ``[DONE]``;
    then what is left of the response (the end of its chunked body) is read before it is
    closed, so its connection goes back to the pool for the next call: a response closed
    unread closes its connection. A server that keeps the stream open after ``[DONE]`` holds
    only this generator (until the read timeout), not the caller, which ``on_done`` told."""
    request = client.build_request("POST", url, headers=headers, content=json.dumps(body).encode(),
                                   timeout=timeout)
    try:
        response = client.send(request, stream=True)
    except httpx.TransportError as exc:
        raise TransportFailure(str(exc)) from exc
    try:
        if response.status_code >= 400:
            raise _status_failure(response)
        if on_headers is not None:
            on_headers(response.headers)
        pieces = response.iter_bytes()
        for event, data in iter_sse(pieces, on_comment=on_alive):
            if data.startswith(b"[DONE]"):
                if on_done is not None:
                    on_done()
                for _ in pieces:  # the rest: only the body's end, from a server that ends it
                    pass
                return
            yield _payload(event, data)
    except httpx.TransportError as exc:
        raise TransportFailure(str(exc)) from exc
    finally:
        response.close()


def _status_failure(response: httpx.Response) -> HTTPStatusFailure:
    text = response.read().decode("utf-8", "replace").strip()
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    if isinstance(body, dict):
        body = body.get("error", body)  # what the SDK reported as the error body
    return HTTPStatusFailure(response.status_code, body, text, response.headers)


def _payload(event: str | None, data: bytes) -> Any:
    payload = json.loads(data)
    if isinstance(payload, dict) and (payload.get("error") or event == "error"):
        error = payload.get("error") or payload
        message = error.get("message") if isinstance(error, dict) else None
        raise StreamErrorEvent(message if isinstance(message, str) and message else
                               "an error occurred during streaming", error)
    return payload


def iter_sse(pieces: Iterable[bytes], on_comment: Callable[[], None] | None = None
             ) -> Iterator[tuple[str | None, bytes]]:
    """``(event name or None, data)`` per dispatched event, from byte pieces split anywhere;
    ``on_comment()`` for each comment line."""
    event: str | None = None
    data: list[bytes] = []
    for line in _lines(pieces):
        if not line:  # a blank line dispatches the event
            if data:
                yield event, b"\n".join(data)
            event, data = None, []
            continue
        if line[:1] == b":":  # a comment: keep-alive
            if on_comment is not None:
                on_comment()
            continue
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")


def _lines(pieces: Iterable[bytes]) -> Iterator[bytes]:
    pending: list[bytes] = []  # parts of a line not yet ended: joined once, never re-copied
    for piece in pieces:
        if b"\n" not in piece:
            if piece:
                pending.append(piece)
            continue
        lines = piece.split(b"\n")
        if pending:
            pending.append(lines[0])
            lines[0] = b"".join(pending)
            pending = []
        tail = lines.pop()
        if tail:
            pending.append(tail)
        for line in lines:
            yield line[:-1] if line[-1:] == b"\r" else line
